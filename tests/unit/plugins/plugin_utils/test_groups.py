"""Decisions for multi-node groups from every node's facts: one node's finding holds for its whole group."""

from ansible_collections.gpuops.sglang.plugins.plugin_utils.groups import (
    complete_groups,
    flagged_members,
    group_results,
    missing_nodes,
    play_facts,
)

HOSTS = ["ct401", "ct402"]
RANK0 = {"name": "tp8", "node": {"group": "tp8", "nnodes": 2, "node_rank": 0, "hosts": HOSTS}}
OTHER = {"name": "tp4", "node": {"group": "tp4", "nnodes": 2, "node_rank": 0, "hosts": ["ct401", "ct403"]}}


def test_a_group_flagged_on_any_of_its_nodes_is_flagged_on_every_node():
    everyone = {"ct401": [], "ct402": [], "ct403": []}
    assert flagged_members([RANK0, OTHER], dict(everyone, ct402=["tp8"])) == [RANK0]
    assert flagged_members([RANK0, OTHER], dict(everyone, ct402=["tp4"])) == []  # ct402 is no node of tp4
    assert flagged_members([RANK0, OTHER], everyone) == []


def test_a_node_that_failed_outright_flags_its_groups_and_they_are_not_acted_on():
    # ct403 left the run (unreachable, a failed call): it said nothing, which is not "fine".
    assert flagged_members([RANK0, OTHER], {"ct401": [], "ct402": []}) == [OTHER]
    assert complete_groups([RANK0, OTHER], ["ct401", "ct402"]) == [RANK0]


def test_facts_of_the_play_default_to_nothing_for_a_host_without_them():
    hostvars = {"ct401": {"relaunch_group_changes": ["tp8"]}, "ct402": {}}
    facts = play_facts(HOSTS + ["gone"], hostvars, "relaunch_group_changes")
    assert facts == {"ct401": ["tp8"], "ct402": [], "gone": []}


def test_a_group_with_a_node_outside_this_batch_is_named_with_why():
    assert missing_nodes([RANK0, OTHER], ["ct401", "ct402"], ["ct401", "ct402"]) == [
        ("group tp4: node ct403 failed earlier in this run; a group is relaunched as one unit, so none of its ranks "
         "was touched")]
    assert missing_nodes([RANK0], ["ct401"], HOSTS) == [
        ("group tp8: node ct402 is in another batch of relaunch_serial; a group is relaunched as one unit, so none of "
         "its ranks was touched")]


def test_a_rank_stopped_because_its_group_failed_elsewhere_is_down_with_that_reason():
    started = [{"name": "tp8", "action": "relaunched", "pid": 41, "error": None}]
    ready = [{"name": "tp8", "status": "ready"}]
    [result] = group_results([RANK0], [], [], started, [{"name": "tp8", "action": "stopped"}], ready,
                             {"ct401": [], "ct402": ["tp8"]})
    assert result["down"] and result["pid"] is None
    assert result["error"] == ("tp8 rank 0 stopped with its group: its rank on ct402 did not stop, start or come up "
                               "(see there); a group runs only as a whole")
    # Its own failure keeps its own words (the wait's traceback), and an unchanged group its plan.
    crashed = [{"name": "tp8", "status": "crashed"}]
    assert group_results([RANK0], [], [], started, [{"name": "tp8"}], crashed,
                         {"ct401": ["tp8"], "ct402": []})[0] == started[0]
    plan = [{"name": "tp8", "action": "unchanged", "pid": 7}]
    assert group_results([RANK0], plan, [], [], [], [], {}) == plan
