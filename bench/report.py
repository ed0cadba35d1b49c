"""The results of a bench run: latest.json (every run's numbers), latest.md (the tables), latest.png (the plot),
and a dated section appended to the history (bench/results.md)."""

import json
import os
import statistics

from bench import scenarios as catalogue

FIGURES = ("wall_s", "overhead_s", "cpu_s", "pct_exec", "changed", "ready_to_known_s", "crash_to_failed_s",
           "zombie_named_s", "startup_s")


def spread(values):
    values = [value for value in values if value is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def summarize(records):
    """Per (target, hosts, scenario, contender): each figure's median/min/max, runs ok, ratio to ours."""
    groups = {}
    for record in records:
        key = (record["target"], record["hosts"], record["scenario"], record["contender"])
        groups.setdefault(key, []).append(record)
    rows = []
    for (target, hosts, scenario, contender), runs in groups.items():
        row = {"target": target, "hosts": hosts, "scenario": scenario, "contender": contender, "runs": len(runs),
               "runs_ok": sum(1 for run in runs if run["rc"] == 0),
               "zombie_named": sum(1 for run in runs if run["zombie_named_s"] is not None),
               "zombie_alive_after": sum(1 for run in runs if run["zombie_alive_after"]),
               "servers_ready": spread([run["ready"] for run in runs]),
               "servers_relaunched": spread([run["relaunched"] for run in runs]),
               "failure_names_crashed": sum(1 for run in runs if run["failure_names_crashed"]),
               "crash_runs": sum(1 for run in runs if run["crashed"]),
               "servers_per_host": runs[0]["servers_per_host"]}
        row.update({figure: spread([run[figure] for run in runs]) for figure in FIGURES})
        rows.append(row)
    for row in rows:
        ours = next((other for other in rows if other["contender"] == "ours"
                     and (other["target"], other["hosts"], other["scenario"])
                     == (row["target"], row["hosts"], row["scenario"])), None)
        row["wall_ratio_to_ours"] = (row["wall_s"]["median"] / ours["wall_s"]["median"]
                                     if ours and ours["wall_s"] and row["wall_s"] else None)
    order = {key: index for index, key in enumerate(catalogue.SCENARIO_KEYS + catalogue.CONTENDER_KEYS)}
    rows.sort(key=lambda row: (row["target"], row["hosts"], order[row["scenario"]], order[row["contender"]]))
    return rows


def cell(stats, digits=1):
    if not stats:
        return "-"
    median, low, high = (f"{stats[key]:.{digits}f}" for key in ("median", "min", "max"))
    return median if low == high else f"{median} ({low}-{high})"


def ratio_cell(row):
    if row["contender"] == "ours":
        return "1"
    return f"{row['wall_ratio_to_ours']:.2f}" if row["wall_ratio_to_ours"] else "-"


def crash_cell(row):
    if not row["crash_to_failed_s"]:
        return "-"
    return f"{cell(row['crash_to_failed_s'])}; names it {row['failure_names_crashed']}/{row['crash_runs']}"


def zombie_cell(row):
    if row["scenario"] != "zombie":
        return "-"
    named = f"named {row['zombie_named']}/{row['runs']}"
    if row["zombie_named"]:
        named += f" after {cell(row['zombie_named_s'])} s"
    return f"{named}; alive after {row['zombie_alive_after']}/{row['runs']}"


LABELS = {contender.key: contender.label for contender in catalogue.CONTENDERS}
SHORT = {"ours": "ours", "seed_sleep": "(a) sleep", "uri_until": "(b) uri until", "by_hand_loop": "(c) by-hand loop"}


def scenario_table(rows):
    lines = [("| scenario | contender | ok | wall s | x ours | overhead s | healthy -> knows s | crash -> fails s "
             "| zombie | servers ready | pct exec | controller CPU s | changed |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(" | ".join([
            f"| {row['scenario']}", SHORT[row["contender"]], f"{row['runs_ok']}/{row['runs']}", cell(row["wall_s"]),
            ratio_cell(row), cell(row["overhead_s"]), cell(row["ready_to_known_s"]), crash_cell(row),
            zombie_cell(row), f"{cell(row['servers_ready'], 0)}/{cell(row['servers_relaunched'], 0)}",
            cell(row["pct_exec"], 0), cell(row["cpu_s"]), cell(row["changed"], 0)]) + " |")
    return lines


def scaling_table(rows, costs):
    lines = [("| containers | contender | ok | wall s | x ours | overhead s | overhead per host s | pct exec "
             "| pct exec per host | controller CPU s | CPU s / wall s |"),
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        hosts = row["hosts"]
        per_host = {"median": row["overhead_s"]["median"] / hosts, "min": row["overhead_s"]["min"] / hosts,
                    "max": row["overhead_s"]["max"] / hosts} if row["overhead_s"] else None
        exec_per_host = ({key: row["pct_exec"][key] / hosts for key in ("median", "min", "max")}
                         if row["pct_exec"] else None)
        busy = row["cpu_s"]["median"] / row["wall_s"]["median"] if row["cpu_s"] and row["wall_s"] else None
        lines.append(" | ".join([
            f"| {hosts}", SHORT[row["contender"]], f"{row['runs_ok']}/{row['runs']}", cell(row["wall_s"]),
            ratio_cell(row), cell(row["overhead_s"]), cell(per_host, 2), cell(row["pct_exec"], 0),
            cell(exec_per_host, 0), cell(row["cpu_s"]), f"{busy:.2f}" if busy else "-"]) + " |")
    if costs:
        lines += ["", ("One `pct exec` as the controller sees it (`bench/pct_exec_cost.yml`: one `raw` task of "
                  f"{costs[0]['calls_per_host']} items per container, all containers at once, forks = containers):"),
                  "", "| containers | seconds per pct exec | pct exec | controller CPU s |", "|---|---|---|---|"]
        lines += [f"| {cost['hosts']} | {cost['seconds_per_call']:.3f} | {cost['pct_exec']} | {cost['cpu_s']:.1f} |"
                  for cost in costs]
    return lines


FIGURES_NOTE = (
    "Figures: wall = ansible-playbook start to exit; overhead = wall - the slowest relaunched server's own startup "
    "(launched -> ready, from its log, on this machine's clock); healthy -> knows = last server ready -> end of the "
    "contender's readiness task; crash -> fails = a server's log says it crashed -> the first failed task, and in how "
    "many runs that failure names the crashed server (else it was another one not ready yet); zombie: "
    "whether a task result names the orphan's pid, and whether it still runs after the run; pct exec = calls in the "
    "rig's pct call log; controller CPU = user + system seconds of ansible-playbook and its children (local: the "
    "modules run on this machine too); changed = the recap's count; ready / relaunched = servers whose log said "
    "ready before the run ended / servers the run launched.")


def header(meta):
    playbooks = {contender.key: contender.playbook for contender in catalogue.CONTENDERS}
    setting = (f"Machine: {meta['machine']}. Commit {meta['commit']}. {meta['reps']} repetitions per scenario, "
               "contenders alternating (order rotated each repetition). Simulated startup: "
               f"SGLANG_SIM_TIME_SCALE={meta['time_scale']}. Command: `{meta['command']}`.")
    for name, earlier in (meta.get("merged") or {}).items():
        setting += (f" The {name} figures come from an earlier run ({earlier['date']}, commit {earlier['commit']}, "
                    f"machine {earlier['machine']}): `{earlier['command']}`.")
    lines = [f"# Benchmark {meta['date']}: gpuops.sglang vs. what users do today", "", setting, "", "Contenders:", ""]
    lines += [f"- **{SHORT[key]}**: {LABELS[key]} (`{playbooks[key]}`)" for key in meta["contenders"]]
    lines += ["", "Scenarios:", ""]
    lines += [f"- **{scenario.key}**: {scenario.title}" for scenario in catalogue.SCENARIOS
              if scenario.key in meta["scenarios"]]
    for target, limits in meta.get("only", {}).items():
        lines += [f"- {target}: {SHORT[key]} only in {', '.join(keys)} (time budget)" for key, keys in limits.items()]
    return lines


def calibration_table(calibrations):
    scaling = (f"The baselines' waits are the seed's (sleep {catalogue.SEED_SLEEP_S} s, delay "
               f"{catalogue.SEED_DELAY_S} s, {catalogue.SEED_RETRIES} retries) scaled by the slowest simulated startup "
               f"(median over ours' runs of the layout before the first baseline run) / {catalogue.SEED_STARTUP_S} s:")
    lines = [scaling, "",
             "| target | fleet | hosts | slowest startup s (runs) | scale | sleep s | delay s | retries |",
             "|---|---|---|---|---|---|---|---|"]
    for target, items in calibrations.items():
        lines += [f"| {target} | {c['layout']} | {c['hosts']} | {c['startup_s']:.2f} ({c['samples']}) | "
                  f"{c['scale']:.4f} | {c['bench_sleep_s']} | {c['bench_delay_s']} | {c['bench_retries']} |"
                  for c in items]
    return lines


def markdown(result):
    meta = result["meta"]
    lines = header(meta) + [""] + calibration_table(result["calibrations"])
    for target in meta["targets"]:
        rows = [row for row in result["summary"] if row["target"] == target and row["hosts"] == 1]
        if rows:
            title = f"## {target}: one host, {rows[0]['servers_per_host']} servers per fleet layout (median (min-max))"
            lines += ["", title, ""] + scenario_table(rows)
        elif target in result["skipped"]:
            lines += ["", f"## {target}"]
        if target in result["skipped"]:
            lines += ["", f"{target}: {result['skipped'][target]}"]
    if result["scaling"]:
        scaling = [row for row in result["summary"] if row["scenario"] == "healthy" and row["target"] == "pct"]
        title = (f"## Scaling: pct, healthy, containers x {result['scaling']['servers_per_host']} servers, "
                 "forks = containers")
        lines += ["", title, ""] + scaling_table(scaling, result["pct_exec_cost"])
        if result["scaling"].get("note"):
            lines += ["", result["scaling"]["note"]]
    return "\n".join(lines + ["", FIGURES_NOTE, ""])


def write(result, out_dir, plot=True):
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "latest.json").write_text(json.dumps(result, indent=1) + "\n")
    (out_dir / "latest.md").write_text(markdown(result))
    if plot:
        write_plot(result, out_dir / "latest.png")


def append_history(result, history):
    text = markdown(result).replace("# Benchmark ", "## Benchmark ", 1).replace("\n## ", "\n### ")
    with open(history, "a") as handle:
        handle.write("\n" + text)


def bars(axis, rows, contenders, figure, label=None):
    """Grouped bars of ``figure`` (median, min-max whiskers) per scenario and contender; ``label`` annotates."""
    scenario_keys = [key for key in catalogue.SCENARIO_KEYS if any(row["scenario"] == key for row in rows)]
    width = 0.8 / len(contenders)
    for index, contender in enumerate(contenders):
        found = {row["scenario"]: row for row in rows if row["contender"] == contender}
        stats = [found[key][figure] if key in found else None for key in scenario_keys]
        positions = [place + index * width for place in range(len(scenario_keys))]
        medians = [item["median"] if item else 0 for item in stats]
        errors = [[item["median"] - item["min"] if item else 0 for item in stats],
                  [item["max"] - item["median"] if item else 0 for item in stats]]
        axis.bar(positions, medians, width, yerr=errors, capsize=2, label=SHORT[contender])
        if label:
            for position, key, median in zip(positions, scenario_keys, medians):
                text = label(found.get(key))
                if text:
                    axis.annotate(text, (position, median), ha="center", va="bottom", fontsize=6,
                                  xytext=(0, 3), textcoords="offset points")
    axis.set_xticks([place + 0.4 - width / 2 for place in range(len(scenario_keys))], scenario_keys)


def pct_exec_label(row):
    return f"{row['pct_exec']['median']:.0f}" if row and row["pct_exec"] else None


def write_plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot

    targets = [target for target in result["meta"]["targets"]
               if any(row["target"] == target and row["hosts"] == 1 for row in result["summary"])]
    scaling = [row for row in result["summary"] if row["target"] == "pct" and row["scenario"] == "healthy"]
    columns = max(len(targets) + (1 if result["scaling"] else 0), 1)
    figure, axes = pyplot.subplots(2, columns, figsize=(7 * columns, 8.5), squeeze=False)
    contenders = result["meta"]["contenders"]
    for column, target in enumerate(targets):
        rows = [row for row in result["summary"] if row["target"] == target and row["hosts"] == 1]
        wall, cpu = axes[0][column], axes[1][column]
        bars(wall, rows, contenders, "wall_s", pct_exec_label if target == "pct" else None)
        wall.set_ylabel("wall time, s (median, min-max)")
        wall.set_title(f"{target}: one host" + (" (numbers: pct exec calls)" if target == "pct" else ""))
        wall.legend(fontsize="small")
        bars(cpu, rows, contenders, "cpu_s")
        cpu.set_ylabel("controller CPU, s (median, min-max)")
    if result["scaling"]:
        overhead, busy = axes[0][-1], axes[1][-1]
        for contender in contenders:
            points = sorted((row["hosts"], row["overhead_s"]["median"] / row["hosts"],
                             row["cpu_s"]["median"] / row["wall_s"]["median"])
                            for row in scaling if row["contender"] == contender and row["overhead_s"])
            if points:
                hosts = [point[0] for point in points]
                overhead.plot(hosts, [point[1] for point in points], marker="o", label=SHORT[contender])
                busy.plot(hosts, [point[2] for point in points], marker="o", label=SHORT[contender])
        overhead.set_ylabel("overhead per host, s (median)")
        overhead.set_title("pct scaling: containers x 8 servers, forks = containers")
        overhead.legend(fontsize="small")
        busy.axhline(os.cpu_count() or 1, color="grey", linestyle="--", linewidth=1)
        busy.set_ylabel("controller CPU s / wall s (dashed: the machine's cores)")
        for axis in (overhead, busy):
            axis.set_xscale("log", base=2)
            axis.set_xlabel("containers")
    figure.suptitle(f"gpuops.sglang bench {result['meta']['date']}: simulated fleets on a shared "
                    f"{os.cpu_count()}-core machine")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
