#!/usr/bin/env python3
"""The figures of docs/benchmarks.md, generated from the benchmarks' own JSON.

    scripts/results.py record NAME FILE COMMAND   keep FILE (memory-bench's or memory-eval's --json) as
                                                  docs/results/NAME.json, with the command, commit, machine and date
    scripts/results.py render                     rewrite every generated table of docs/benchmarks.md

A generated table sits between `<!-- results:NAME:TABLE -->` and `<!-- /results -->`; everything between the two
markers is replaced. NAME is a recorded result (bench, tenants, load, eval); TABLE one of the renderers below.
"""

import datetime
import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
DOC = ROOT / "docs" / "benchmarks.md"


def git(*args):
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()


def machine():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
    cores = sum(1 for l in open("/proc/cpuinfo") if l.startswith("processor"))
    memory = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal"))
    return f"{cores} vCPUs, {cpu}, {round(memory / 2**20)} GiB"


def record(name, file, command):
    commit = git("rev-parse", "--short", "HEAD")
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += " (with uncommitted changes)"
    data = json.loads(pathlib.Path(file).read_text())
    meta = {"command": command, "commit": commit, "machine": machine(), "date": datetime.date.today().isoformat()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps({"meta": meta, "data": data}, indent=1) + "\n")


def pct(p, digits=2):
    return " / ".join(f"{p[k]:.{digits}f}" for k in ("p50", "p95", "p99"))


def p50_95(p):
    return f"{p['p50']:.2f} / {p['p95']:.2f}"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def bench_latency(data):
    rows = [
        [f"{s['memories']:,}", pct(s["vector_ms"]), pct(s["keyword_ms"]), pct(s["fusion_ms"]), pct(s["e2e_ms"]),
         pct(s["baseline_ms"]), pct(s["baseline_depth_ms"]), f"{s['ratio_p95']:.2f} ({s['ratio_depth_p95']:.2f})",
         f"{s['filtered_recall_at_10']:.3f}, {s['keyword_recall_at_10']:.3f}"]
        for s in data["sizes"]
    ]
    header = ["memories", "vector", "keyword", "fusion + filter", "end to end", "raw, LIMIT 20", "raw, LIMIT 50",
              "e2e / raw p95", "recall@10 (ANN, keyword)"]
    return "Latencies in ms, p50 / p95 / p99:\n\n" + table(header, rows)


def bench_parts(data):
    rows = [
        [f"{s['memories']:,}", pct(s["context_ms"]), pct(s["branches_ms"]), pct(s["e2e_ms"]),
         f"{pct(s['vector_alone_ms'])}; {pct(s['keyword_alone_ms'])}",
         f"{p50_95(s['keyword_largest_ms'])} against {p50_95(s['keyword_exact_ms'])}", f"{s['tenant_indexes']}"]
        for s in data["sizes"]
    ]
    header = ["memories", "context read", "Stage 1 (both branches, fused)", "end to end",
              "each branch alone: vector; keyword", "largest tenant's keyword branch against row-wise exact BM25, p50 / p95",
              "tenant ANN indexes"]
    return table(header, rows)


def bench_query_path(data):
    embed = data["embed_ms"]
    rows = [["query embedding by word pieces, p50 ms",
             ", ".join(f"{b['word_pieces']}: {b['ms']['p50']:.2f}" for b in embed["by_length"])]]
    ingest = data["ingest_per_s"]
    rows.append(["ingest through `Ingestor`, one-sentence / one-paragraph memories a second",
                 f"{ingest['sentence_per_s']:.0f} / {ingest['paragraph_per_s']:.0f}"])
    if data.get("cold_start_ms"):
        rows.append(["cold start of `retrieve` to its first answer, ms", pct(data["cold_start_ms"], 0)])
    http = data.get("http")
    if http:
        for kind in ("distinct", "repeated"):
            run = http[kind]
            rows.append([
                f"HTTP, {kind} queries, {run['concurrency']} clients: requests/s, p50 / p95 ms, server CPU ms a request",
                f"{run['rps']:.0f}, {run['p50_ms']:.1f} / {run['p95_ms']:.1f}, {run['server_cpu_ms_per_request']:.2f}"
                + (f" ({run['errors']} errors)" if run["errors"] else "")])
        if http.get("peak_rss_mb"):
            rows.append(["server peak RSS, MB", f"{http['peak_rss_mb']:.0f}"])
    return table(["measure (p50 / p95 / p99)", "value"], rows)


def bench_all(data):
    return "\n\n".join([bench_latency(data), bench_parts(data), bench_query_path(data)])


def load_saturation(data):
    def statuses(seen):
        return ", ".join(f"{n:,} × {code}" for code, n in sorted(seen["by_status"].items()))

    alone, under, busy = data["quiet_alone"], data["quiet_under_load"], data["busy"]
    ratio = under["answered_ms"]["p95"] / alone["answered_ms"]["p95"]
    rss = (f"{data['idle_rss_mb']:.0f} → {data['peak_rss_mb']:.0f}"
           if data.get("idle_rss_mb") and data.get("peak_rss_mb") else "n/a")
    header = ["quiet alone, ms", "quiet under load, ms", "quiet p95 ratio", "busy answered/s, p50 / p95 ms",
              "busy statuses", "ingested/s", "RSS idle → peak, MB"]
    row = [pct(alone["answered_ms"], 1), pct(under["answered_ms"], 1), f"{ratio:.2f}",
           f"{busy['requests_per_s']:.1f}, {busy['answered_ms']['p50']:,.0f} / {busy['answered_ms']['p95']:,.0f}",
           statuses(busy), f"{data.get('ingested_per_s', 0):.1f}", rss]
    lead = (f"{data['clients']} clients of a tenant of {data['memories_of_the_busy_organization']:,} memories, a quiet "
            f"tenant of {data['memories_of_the_quiet_organization']:,}, {data['seconds']} s each; p50 / p95 / p99:\n\n")
    return lead + table(header, [row])


def eval_quality(data):
    ran = {m for s in data for m in s["strategies"]}
    modes = [m for m in ["vector", "keyword", "hybrid", "pipeline", "pipeline-passive", "pipeline-spec"] if m in ran]
    rows = []
    for s in data:
        cells = []
        for m in modes:
            r = s["strategies"].get(m)
            cells.append(f"{r['ndcg@10']:.3f} / {r['recall@10']:.3f}" if r else "")
        rows.append([s["name"], f"{s['documents']:,}", f"{s['queries']:,}", *cells])
    return "nDCG@10 / Recall@10:\n\n" + table(["set", "documents", "queries", *modes], rows)


def passive_floor(data):
    """`data`: {foreign set: memory-eval's JSON of one set asked with --passive-floors and that set --foreign}."""
    foreign = list(data)
    own = data[foreign[0]][0]
    rows = []
    for i, at in enumerate(own["passive_floors"]):
        nothing = [f"{data[f][0]['passive_floors'][i]['foreign_nothing']:.3f}" for f in foreign]
        rows.append([f"{at['floor']:.2f}", f"{at['ndcg10']:.4f}", f"{at['recall10']:.4f}",
                     f"{at['injected_chars_p50']:,.0f} / {at['injected_chars_p95']:,.0f}", *nothing])
    header = ["floor", f"{own['name']} nDCG@10", "R@10", "characters injected a turn, p50 / p95",
              *[f"{f} questions injecting nothing" for f in foreign]]
    return table(header, rows)


def loso_table(data):
    """`data`: memory-eval's leave-one-shape-out list (`.local/eval-all.loso.json`)."""
    rows = [[h["shape"], h["set"], f"{h['today'][0]:.4f}", f"{h['learned'][0]:.4f} ({h['learned'][0] - h['today'][0]:+.4f})",
             f"{h['today'][1]:.4f}", f"{h['learned'][1]:.4f} ({h['learned'][1] - h['today'][1]:+.4f})"] for h in data]
    shapes = {}
    for h in data:
        shapes.setdefault(h["shape"], []).append(h)
    mean = [sum(sum(h[k][i] for h in hs) / len(hs) for hs in shapes.values()) / len(shapes)
            for k in ("today", "learned") for i in (0, 1)]
    rows.append(["mean of shapes", "", f"{mean[0]:.4f}", f"{mean[2]:.4f} ({mean[2] - mean[0]:+.4f})",
                 f"{mean[1]:.4f}", f"{mean[3]:.4f} ({mean[3] - mean[1]:+.4f})"])
    header = ["held-out shape", "set", "relevance nDCG@10", "learned nDCG@10", "relevance R@10", "learned R@10"]
    return table(header, rows)


def tenant_steps(data):
    """`data`: memory-bench's JSON of the tenant-count shape (`--indexed-tenants`)."""
    rows = [[f"{s['indexed']:,}", f"{s['move_s']:.0f}", pct(s["e2e_ms"]), pct(s["vector_ms"]), pct(s["keyword_ms"]),
             pct(s["vector_planning_ms"], 3), pct(s["vector_planning_indexed_ms"], 3)] for s in data["steps"]]
    lead = (f"{data['memories']:,} memories in {data['organizations']:,} organisations (loaded in {data['load_s']:.0f} s, "
            f"indexed in {data['index_s']:.0f} s), {data['queries']:,} queries a step; ms, p50 / p95 / p99:\n\n")
    header = ["tenants with their own partition", "moved in, s", "end to end", "vector", "keyword",
              "planning the vector branch", "planning it, indexed tenants' queries"]
    return lead + table(header, rows)


RENDERERS = {
    "bench": {"latency": bench_latency, "parts": bench_parts, "query-path": bench_query_path, "all": bench_all},
    "load": {"saturation": load_saturation},
    "eval": {"quality": eval_quality},
    "floor": {"passive": passive_floor},
    "loso": {"held-out": loso_table},
    "tenants": {"steps": tenant_steps},
}


def render():
    doc = DOC.read_text()

    def block(match):
        name, kind = match.group(1), match.group(2)
        result = json.loads((RESULTS / f"{name}.json").read_text())
        meta = result["meta"]
        source = (f"`{meta['command']}`, commit `{meta['commit']}`, {meta['machine']}, {meta['date']} "
                  f"([results/{name}.json](results/{name}.json)):")
        body = RENDERERS[name][kind](result["data"])
        return f"<!-- results:{name}:{kind} -->\n{source}\n\n{body}\n<!-- /results -->"

    doc = re.sub(r"<!-- results:([a-z-]+):([a-z-]+) -->.*?<!-- /results -->", block, doc, flags=re.S)
    DOC.write_text(doc)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "record":
        record(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1:] == ["render"]:
        render()
    else:
        sys.exit(__doc__)
