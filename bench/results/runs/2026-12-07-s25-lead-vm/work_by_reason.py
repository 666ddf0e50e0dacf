#!/usr/bin/env python3
"""Twenty-fifth session: whose work makes a Mooncake replay's busiest replica.

    python3 work_by_reason.py MOONCAKE_TRACE.jsonl DECISIONS.tsv[.gz] ...

DECISIONS: `kvcascade bench routing --decisions DIR` files of replays of the trace made by
bench/mooncake_trace.py (same requests, same order). A request's work on its replica is what the
benchmark's max/mean counts: its uncached prompt (prompt bytes - cached; a byte is a token) plus
its completion (the trace's output length). Prints, per file, each replica's work over the mean
and, for the busiest and for the others on average, the work by the router's reason for the
decision, in mean requests' work; then the busiest replica's work over the replay's quarters.
"""
import collections, csv, gzip, json, sys

trace = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
trace = [r for r in trace if r['input_length'] + r['output_length'] <= 32768]
for path in sys.argv[2:]:
    f = gzip.open(path, 'rt') if path.endswith('.gz') else open(path)
    rows = list(csv.DictReader(f, delimiter='\t'))
    assert len(rows) == len(trace), (len(rows), len(trace))
    work = collections.Counter()
    by_reason = collections.defaultdict(collections.Counter)
    when = collections.defaultdict(list)
    end = max(float(r['sent_s']) for r in rows)
    for i, r in enumerate(rows):
        w = int(r['prompt_bytes']) - int(r['cached']) + trace[i]['output_length']
        work[r['replica']] += w
        by_reason[r['replica']][r['reason']] += w
        when[r['replica']].append((float(r['sent_s']), w))
    reps = sorted(work)
    mean = sum(work.values()) / len(reps)
    mean_req = sum(work.values()) / len(rows)
    top = max(reps, key=lambda k: work[k])
    print(f"{path}: max/mean {work[top] / mean:.3f} ({top}); per replica:",
          ' '.join(f"{k}={work[k] / mean:.2f}" for k in reps))
    reasons = sorted({x for c in by_reason.values() for x in c})
    for x in reasons:
        others = sum(by_reason[k][x] for k in reps if k != top) / (len(reps) - 1)
        print(f"  {x:18s} busiest {by_reason[top][x] / mean_req:6.1f}  others {others / mean_req:6.1f}"
              " mean requests")
    q = [0.0] * 4
    qa = [0.0] * 4
    for k in reps:
        for t, w in when[k]:
            j = min(3, int(4 * t / end)) if end > 0 else 0
            qa[j] += w / len(reps)
            if k == top:
                q[j] += w
    print('  busiest / mean by quarter of the replay:', ' '.join(f"{a / b:.2f}" for a, b in zip(q, qa)))
