"""bench_ab_table.py OUT_DIR — a Markdown table of the medians scripts/bench_ab.sh wrote (old / new per round, ms)."""
import json,glob,sys,collections,statistics
out=sys.argv[1]
med=collections.defaultdict(lambda: collections.defaultdict(list))
for f in sorted(glob.glob(out+'/*.json')):
    side=f.split('_')[-2]
    d=json.load(open(f))
    for b in d['benchmarks']:
        name=b.get('run_name',b['name'])
        if b.get('aggregate_name')=='median' or ('aggregate_name' not in b):
            med[name][side].append(b['real_time'] if b.get('time_unit')=='ms' else b['real_time']/1e6 if b.get('time_unit')=='ns' else b['real_time']/1e3 if b.get('time_unit')=='us' else b['real_time']*1e3)
print('| benchmark | old (ms) | new (ms) | new/old |')
print('|---|---|---|---|')
for name,v in med.items():
    a=v.get('A',[]); b=v.get('B',[])
    if not a or not b: continue
    fa=' / '.join('%.3g'%x for x in a); fb=' / '.join('%.3g'%x for x in b)
    print('| %s | %s | %s | %.2f |'%(name.replace('/real_time',''),fa,fb,statistics.median(b)/statistics.median(a)))
