import csv, gzip, sys, collections
path = sys.argv[1]
rows = csv.reader(gzip.open(path, 'rt'))
file = func = None; header = None
agg = collections.defaultdict(lambda: collections.Counter())
for r in rows:
    if not r: continue
    if r[0] == 'File Path': file = r[1].split('/')[-1]; continue
    if r[0] == 'Function Name': func = r[1]; continue
    if r[0] == 'Line No': header = r; si = header.index('Warp Stall Sampling (All Samples)'); ie = header.index('Instructions Executed'); continue
    if r[0] and header:
        kern = 'scan' if 'scan' in func else 'prepare'
        try: s = int(r[si]); n = int(r[ie])
        except: continue
        agg[kern][(file, int(r[0]), r[1][:90])] += s
for k, c in agg.items():
    tot = sum(c.values())
    print('==', k, 'samples', tot)
    for (f, l, src), s in c.most_common(int(sys.argv[2]) if len(sys.argv) > 2 else 25):
        print('%5.1f%% %s:%d  %s' % (100 * s / tot, f, l, src.strip()))
