import os, random, sys
root = sys.argv[1]; n = int(sys.argv[2]); seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
rnd = random.Random(seed)
dirs = [os.path.join(root, f"a{i}", f"b{j}", f"c{k}", f"d{l}") for i in range(3) for j in range(3) for k in range(3) for l in range(2)]
files = []
for k in range(n):
    d = rnd.choice(dirs)
    # some at middle levels
    lvl = rnd.choice([2, 3, 4, 4, 5])
    d = d.split(os.sep)
    d = os.sep.join(d[: len(root.split(os.sep)) + lvl - 1]) if lvl < 5 else os.sep.join(d)
    files.append(os.path.join(d, f"m{k:04d}.py"))
rnd.shuffle(files)
for f in files:
    os.makedirs(os.path.dirname(f), exist_ok=True)
    with open(f, "wb") as fh:
        fh.write(os.urandom(rnd.randint(1, 16) * 1024 - rnd.randint(0, 1000)))
print(len(files), "files in", len({os.path.dirname(f) for f in files}), "dirs")
