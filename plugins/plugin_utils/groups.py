# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decisions for multi-node groups that need every node's view: a group is relaunched, kept stopped or failed
as one unit, so what one node found about its rank holds for the ranks of every other node.

Each node publishes the names of its ranks a step flagged (a change needed, a stop that failed, a rank that did
not come up) as a fact; these pure functions combine those facts of the play's hosts.
"""

from __future__ import annotations


def play_facts(hosts, hostvars, name):
    """``{host: hostvars[host][name]}`` for the hosts of the play (``[]`` for a host without that fact)."""
    facts = {}
    for host in hosts:
        try:
            facts[host] = list(hostvars[host].get(name) or [])
        except KeyError:  # a host that left the play before it set the fact
            facts[host] = []
    return facts


def flagged_members(members, flagged_by_host):
    """This node's group ranks whose group some node flagged (its own rank of the same group named) - or whose
    node is missing from ``flagged_by_host``: a node that failed outright said nothing, and cannot be taken as fine."""
    return [member for member in members
            if any(host not in flagged_by_host or member["name"] in flagged_by_host[host]
                   for host in member["node"]["hosts"])]


def complete_groups(members, batch_hosts):
    """The members whose every node is still in this batch of the run: a group is only acted on as a whole."""
    return [member for member in members if all(host in batch_hosts for host in member["node"]["hosts"])]


def missing_nodes(members, batch_hosts, play_hosts):
    """One sentence per group of this node with a node outside this batch of the play: failed or unreachable earlier
    in the run, or in another batch of ``relaunch_serial``; such a group cannot be relaunched as one unit."""
    problems = []
    for member in members:
        gone = [host for host in member["node"]["hosts"] if host not in batch_hosts]
        if gone:
            why = ("is in another batch of relaunch_serial" if all(host in play_hosts for host in gone)
                   else "failed earlier in this run")
            problems.append(f"group {member['name']}: node {', '.join(gone)} {why}; a group is relaunched as one "
                            "unit, so none of its ranks was touched")
    return problems


def group_results(members, plan, stop, start, cleanup, wait, failed_by_host):
    """The server result of each of this node's ranks, as the summary and the failures read them: its start (or its
    stop, or its plan when its group needed no change); a rank that was fine itself but was stopped, or left
    stopped, because its group failed elsewhere says so as its error (it is down)."""
    def by_name(results):
        return {result["name"]: result for result in results or []}

    plan, stop, start, cleanup, wait = map(by_name, (plan, stop, start, cleanup, wait))
    results = []
    for member in members:
        name, node = member["name"], member["node"]
        result = dict(start.get(name) or stop.get(name) or plan.get(name) or {"name": name, "action": "unchanged"})
        own_failure = result.get("error") or wait.get(name, {}).get("status", "ready") != "ready"
        if not own_failure and (name in cleanup or (name in stop and name not in start)):
            elsewhere = [host for host in node["hosts"] if host not in failed_by_host
                         or name in failed_by_host[host]]
            result.update(down=True, pid=None, error=(
                f"{name} rank {node['node_rank']} stopped with its group: its rank on {', '.join(elsewhere)} did not "
                "stop, start or come up (see there); a group runs only as a whole"))
        results.append(result)
    return results
