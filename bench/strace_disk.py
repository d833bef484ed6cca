"""strace_disk.py STRACE_OUT LOG_JSONL: the offload engine's own disk rates in a training run
traced with strace -f -T -tt -e trace=pread64,pwrite64 (bench_plan_auto.sh, STRACE=1): the
transfers of 1 MiB or more in the window of the steps after the first (the trace's end minus
their summed step_ms), bytes over the summed syscall time, reads and writes apart."""
import json
import re
import sys

rows = []
pat = re.compile(r'\d+\s+(\d+):(\d+):([\d.]+) (pread64|pwrite64)\(\d+, \S+, (\d+), \d+\) = \d+ <([\d.]+)>')
for line in open(sys.argv[1]):
    m = pat.match(line)
    if m and int(m.group(5)) >= 1 << 20:
        t = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
        rows.append((t, m.group(4), int(m.group(5)), float(m.group(6))))
ms = [json.loads(line)['step_ms'] for line in open(sys.argv[2])]
if not rows or len(ms) < 2:
    sys.exit(0)
t_from = rows[-1][0] + rows[-1][3] - sum(ms[1:]) / 1000.0
out = []
for kind, name in (('pread64', 'read'), ('pwrite64', 'write')):
    sel = [r for r in rows if r[1] == kind and r[0] >= t_from]
    n, t = sum(r[2] for r in sel), sum(r[3] for r in sel)
    if t > 0:
        out.append('%s %.2f GB/s (%d transfers of %.0f MB)' % (name, n / t / 1e9, len(sel), sel[0][2] / 1e6))
print("    the engine's disk after its first step: " + ', '.join(out))
