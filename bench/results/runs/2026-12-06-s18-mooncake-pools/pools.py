"""What this folder's scripts share: a prompt as chained 16-byte blocks (as the oracle's hashes in
bench routing), a prompt's leading blocks found in a cache, and the caches' rules."""
import heapq
from collections import OrderedDict


def blocks_of(prompt):
    p = prompt.encode()
    out, h = [], 0
    for k in range(len(p) // 16):
        h = hash((h, p[16 * k:16 * k + 16]))
        out.append(h)
    return out


def lead(bl, cache):
    """The prompt's leading blocks that `cache` holds (anything supporting `in`)."""
    i = 0
    while i < len(bl) and bl[i] in cache:
        i += 1
    return i


def unbounded(rs):
    """Hits of one cache that keeps everything, the prompts in order."""
    seen, hits = set(), 0
    for bl in rs:
        hits += lead(bl, seen)
        seen.update(bl)
    return hits


def lru_insert(od, bl, cap):
    """A prompt into an LRU OrderedDict: its head the most recent, the least recent evicted past
    cap blocks. Returns its blocks that were not there (the tail first)."""
    new = []
    for b in reversed(bl):
        if b in od:
            od.move_to_end(b)
        else:
            od[b] = True
            new.append(b)
    while cap and len(od) > cap:
        od.popitem(last=False)
    return new


def lru(rs, cap):
    od, hits = OrderedDict(), 0
    for bl in rs:
        hits += lead(bl, od)
        lru_insert(od, bl, cap)
    return hits


def belady(rs, cap):
    """Belady's MIN over the prompts' blocks, every block an access, every hit counted (with
    chained blocks MIN evicts a chain's tail before its head, so these are leading-block hits)."""
    acc = [b for bl in rs for b in bl]
    n = len(acc)
    nxt, last = [n] * n, {}
    for i in range(n - 1, -1, -1):
        nxt[i] = last.get(acc[i], n)
        last[acc[i]] = i
    res, heap, hits = {}, [], 0
    for i, b in enumerate(acc):
        if b in res:
            hits += 1
        elif len(res) >= cap:
            while True:
                nu, v = heapq.heappop(heap)
                if res.get(v) == -nu:
                    del res[v]
                    break
        res[b] = nxt[i]
        heapq.heappush(heap, (-nxt[i], b))
    return hits
