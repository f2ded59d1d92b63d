#!/usr/bin/env python3
"""Makes harder variants of labelled traces, to check that detection does not
depend on the public corpus's exact shape (stdlib only, deterministic):

  NAME-a   2 s sampling, 15 % of GPU and allocator samples dropped, each node's
           clock skewed by up to +-0.5 s
  NAME-b   0.5 s sampling
  NAME-c6  (straggler traces) the straggler's forward only 6 % slower than a
           peer's, and its wait in backward as much shorter (lockstep)

  scripts/trace_variants.py SRC_DIR OUT_DIR
  ../shared/eval/score.py --traces OUT_DIR --cmd 'gpumon replay {trace} --output {report}'

Labels are copied unchanged: the events stay where they were.
"""
import gzip, json, random, os, glob, sys, collections
if len(sys.argv) != 3:
    sys.exit(__doc__)
src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
def load(p): return [json.loads(l) for l in gzip.open(p, 'rt')]
def save(name, recs, labels):
    with gzip.open(f'{out}/{name}.jsonl.gz', 'wt') as f:
        for r in recs: f.write(json.dumps(r) + '\n')
    json.dump(labels, open(f'{out}/{name}.labels.json', 'w'))
for p in sorted(glob.glob(src + '/*.jsonl.gz')):
    base = os.path.basename(p)[:-9]
    recs = load(p); labels = json.load(open(p[:-9] + '.labels.json'))
    rnd = random.Random(base)
    hdr, body = recs[0], recs[1:]
    nodes = sorted({r['node'] for r in body if 'node' in r})
    skew = {n: rnd.uniform(-0.5, 0.5) for n in nodes}
    where = {}
    for r in body:
        if r.get('type') == 'rank': where[(r['job'], r['rank'])] = r['node']
    # variant A: 2 s sampling + 15 % dropped gpu samples + skew
    a = []
    for r in body:
        r = dict(r)
        node = r.get('node') or where.get((r.get('job'), r.get('rank')))
        if r.get('type') == 'gpu':
            if int(round(r['t'])) % 2 == 1 or rnd.random() < 0.15: continue
        if r.get('type') == 'alloc' and rnd.random() < 0.15: continue
        if node in skew: r['t'] = round(r['t'] + skew[node], 3)
        a.append(r)
    save(base + '-a', [hdr] + a, labels)
    # variant B: 0.5 s sampling (duplicate gpu samples halfway, small jitter)
    b = []
    for r in body:
        b.append(r)
        if r.get('type') == 'gpu':
            r2 = dict(r); r2['t'] = r['t'] + 0.5; b.append(r2)
    b.sort(key=lambda r: r['t'])
    save(base + '-b', [hdr] + b, labels)
    # variant C: stragglers only 6 % slower in compute
    st = [e for e in labels['events'] if e['kind'] == 'straggler']
    if st:
        e = st[0]
        steps = collections.defaultdict(dict)
        for r in body:
            if r.get('type') == 'step': steps[r['step']][r['rank']] = r
        c = []
        for r in body:
            if r.get('type') == 'step' and r['rank'] == e['rank'] and r['t'] >= e['t_start']:
                peers = [x for k, x in steps[r['step']].items() if k != e['rank']]
                if peers:
                    peer = rnd.choice(peers)
                    # Lockstep: its forward takes 6 % longer and it waits
                    # as much less in backward, where DDP's all-reduce waits.
                    secs = dict(peer['sections'])
                    extra = 0.06 * secs.get('forward', 0.0)
                    secs['forward'] = secs.get('forward', 0.0) + extra
                    if 'backward' in secs and not any('reduce' in k for k in secs):
                        secs['backward'] = max(0.0, secs['backward'] - extra)
                    r = dict(r); r['sections'] = secs
            c.append(r)
        save(base + '-c6', [hdr] + c, labels)
print(f'wrote variants of {len(glob.glob(src + "/*.jsonl.gz"))} traces to {out}')
