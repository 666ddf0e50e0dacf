#!/usr/bin/env python3
"""Fits the sim backend's step model (replica/model/bandwidth_model.cc, step_seconds) to measured H200
steps: the step tables of `kvcascade bench engine --step-table` and the cascade points of
`kvcascade bench engine` rollouts (bench/results/sim-h200-validation.md).

    python3 bench/fit_sim_model.py [--bandwidth-gbps 4550]

Model: max(weights / bandwidth, GEMM FLOPs / G) + KV bytes / bandwidth
       + c0 + c1 * decode rows + c2 * [prefill] + c3 * [prefill and decode]
       + c4 * prefill attention FLOPs + c5 * [a prefill chunk starts after cached tokens]
G by a grid search, c0..c4 by least squares on relative error. Standard library only.
"""
import argparse
import glob
import json
import os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
# Llama-3-8B.
LAYERS, HIDDEN, KV_HEADS, HEAD_DIM, VOCAB, FFN = 32, 4096, 8, 128, 128256, 14336
Q = 32 * HEAD_DIM
LM_HEAD = VOCAB * HIDDEN
BODY = LAYERS * (HIDDEN * (Q + 2 * KV_HEADS * HEAD_DIM) + Q * HIDDEN + 3 * FFN * HIDDEN)
WEIGHT_BYTES = 15009849344.0  # what bench engine counts per step (all but the input embedding)
KV_PER_TOKEN = 2 * LAYERS * KV_HEADS * HEAD_DIM * 2
ATTN_PER_KEY = 4.0 * Q * LAYERS  # QK^T and PV per (query, key)


def points():
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "runs/2026-12-02-step-table/step-table-*.json"))):
        doc = json.load(open(path))
        cached = doc["step_table"].get("cached_prefix", 0)
        for r in doc["step_table"]["rows"]:
            d, p = r["decode"], r["prefill"]
            ctx = r["decode_context_mean"]
            out.append(dict(d=d, p=p, start=cached if p else 0,
                            kv=KV_PER_TOKEN * (d * ctx + (cached + p if p else 0)),
                            pf=ATTN_PER_KEY * (p * cached + 0.5 * p * (p + 1)),
                            df=ATTN_PER_KEY * d * ctx,
                            T=r["step_ms"] / 1e3,
                            src="%s d=%d p=%d" % (os.path.basename(path), d, p)))
    rollouts = [os.path.join(ROOT, "engine-h200.json")] + sorted(
        glob.glob(os.path.join(ROOT, "runs/2026-12-02-step-table/small-batch-*.json")))
    for path in rollouts:
        doc = json.load(open(path))
        rows = doc["groups"] * doc["siblings"]
        for pt in doc["cascade"]["points"]:
            gemm = 2 * BODY * rows + 2 * LM_HEAD * rows
            out.append(dict(d=rows, p=0, start=0, kv=pt["bytes"] - WEIGHT_BYTES, pf=0,
                            df=pt["flops"] - gemm,
                            T=pt["step_ms"] / 1e3,
                            src="%s S=%d" % (os.path.basename(path), pt["S"])))
    return out


def features(x, gemm_rate, bw):
    rows = x["d"] + x["p"]
    logit_rows = x["d"] + (1 if x["p"] else 0)
    gemms = max(WEIGHT_BYTES / bw, (2 * BODY * rows + 2 * LM_HEAD * logit_rows) / gemm_rate)
    fixed = gemms + x["kv"] / bw
    return fixed, [1.0, x["d"], 1.0 if x["p"] else 0.0, 1.0 if x["p"] and x["d"] else 0.0,
                   x["pf"], 1.0 if x["start"] else 0.0]


def solve(a, b):
    n = len(a)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        pivot = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[pivot] = m[pivot], m[c]
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                for k in range(c, n + 1):
                    m[r][k] -= f * m[c][k]
    return [m[i][n] / m[i][i] for i in range(n)]


def fit(pts, gemm_rate, bw):
    n = 6
    a = [[0.0] * n for _ in range(n)]
    b = [0.0] * n
    for x in pts:
        fixed, f = features(x, gemm_rate, bw)
        w = 1 / x["T"] ** 2
        for i in range(n):
            b[i] += w * f[i] * (x["T"] - fixed)
            for j in range(n):
                a[i][j] += w * f[i] * f[j]
    c = solve(a, b)
    errors = []
    for x in pts:
        fixed, f = features(x, gemm_rate, bw)
        predicted = fixed + sum(ci * fi for ci, fi in zip(c, f))
        errors.append((predicted / x["T"] - 1, x, predicted))
    return c, errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bandwidth-gbps", type=float, default=4550)
    args = ap.parse_args()
    bw = args.bandwidth_gbps * 1e9
    pts = points()
    best = None
    for g in range(500, 801, 10):
        c, errors = fit(pts, g * 1e12, bw)
        rms = (sum(e * e for e, _, _ in errors) / len(errors)) ** 0.5
        if best is None or rms < best[0]:
            best = (rms, g, c, errors)
    rms, g, c, errors = best
    print("%d steps; bandwidth %.0f GB/s" % (len(pts), bw / 1e9))
    print("GEMMs %d TFLOP/s, prefill attention %.0f TFLOP/s" % (g, 1 / c[4] / 1e12))
    print("overhead %.3f ms + %.2f us per decode row; +%.3f ms with prefill, +%.3f ms more mixed,"
          " +%.3f ms for a chunk after cached tokens"
          % (c[0] * 1e3, c[1] * 1e6, c[2] * 1e3, c[3] * 1e3, c[5] * 1e3))
    print("RMS error %.1f%%, worst %.1f%%" % (100 * rms, 100 * max(abs(e) for e, _, _ in errors)))
    # The first model (until 2026-12-02): a constant 2.95 ms over the floor at 4,488 GB/s and
    # 630 TFLOP/s, every FLOP counted together.
    old = []
    for x in pts:
        rows = x["d"] + x["p"]
        logit_rows = x["d"] + (1 if x["p"] else 0)
        flops = 2 * BODY * rows + 2 * LM_HEAD * logit_rows + x["pf"] + x["df"]
        predicted = max((WEIGHT_BYTES + x["kv"]) / 4.488e12, flops / 630e12) + 2.95e-3
        old.append(predicted / x["T"] - 1)
    print("the first model on the same steps: RMS error %.1f%%, worst %.1f%%"
          % (100 * (sum(e * e for e in old) / len(old)) ** 0.5, 100 * max(abs(e) for e in old)))
    for e, x, predicted in sorted(errors, key=lambda t: -abs(t[0]))[:8]:
        print("  %-45s measured %8.3f ms, predicted %8.3f ms (%+.1f%%)"
              % (x["src"], x["T"] * 1e3, predicted * 1e3, 100 * e))


if __name__ == "__main__":
    main()
