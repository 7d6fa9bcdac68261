import sys, statistics, collections
d = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) < 8 or p[1] not in ("cold", "data", "meta"): continue
    d[p[1]]["launch"].append(float(p[2])); d[p[1]]["pre"].append(float(p[4])); d[p[1]]["app"].append(float(p[6])); d[p[1]]["meta_ms"].append(float(p[8]))
for v in ("cold", "data", "meta"):
    if v in d:
        print(v, {k: round(statistics.median(x), 3) for k, x in d[v].items()}, "n=%d" % len(d[v]["launch"]), "launches", d[v]["launch"])
