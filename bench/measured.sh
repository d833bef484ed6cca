# bench/measured.sh: sourced by the benchmarks that run one long training process and read its
# time, memory and disk traffic from outside (bench_llama8b.sh, bench_qlora.sh).
#
# measured_fits ESTIMATE ODIR: reads the first "peak" row of an `hptrain estimate` table
#   (device, host, disk) and refuses (status 1) unless ODIR's file system has the disk peak
#   + 4 GiB free and the machine the device + host peaks + 2 GiB available; prints the figures.
# measured_run OUT CMD...: runs CMD under /usr/bin/time -v (OUT/time.txt), its stderr lines
#   stamped with the time they came (OUT/train.log, first line "start T"), its stdout in
#   OUT/stdout.txt, and the process's /proc/PID/io read_bytes and write_bytes (what reached the
#   disk: page cache misses only) and VmRSS sampled every second (OUT/io.log). Returns CMD's
#   exit status.
# measured_summary OUT: prints the figures: initialisation (the start to the plan line), each
#   step (the gap between step lines), the disk read and written per step between the first
#   and the last step line, the peak sampled RSS, the run's own summary lines and time -v's
#   peak RSS.
measured_run() {
    local out=$1; shift
    echo "start $(date +%s.%N)" > "$out/train.log"
    /usr/bin/time -v -o "$out/time.txt" "$@" \
        2> >(while IFS= read -r line; do echo "$(date +%s.%N) $line"; done >> "$out/train.log") \
        > "$out/stdout.txt" &
    local sub=$! pid=""
    for _ in $(seq 50); do
        pid=$(pgrep -P "$sub" -x "$(basename "$1" | cut -c1-15)" | head -1 || true) # not the >(...)
        [ -n "$pid" ] && break
        sleep 0.2
    done
    echo "pid ${pid:-?}" > "$out/pid.txt"
    : > "$out/io.log"
    while kill -0 "$sub" 2>/dev/null; do
        if [ -n "$pid" ] && [ -r "/proc/$pid/io" ]; then
            echo "$(date +%s.%N) $(awk '/^(read_bytes|write_bytes)/ {printf "%s ", $2}' /proc/$pid/io)" \
                "$(awk '/VmRSS/ {print $2}' /proc/$pid/status 2>/dev/null)" >> "$out/io.log"
        fi
        sleep 1
    done
    wait "$sub"
}

measured_summary() {
    python3 - "$1" <<'PY'
import sys, bisect
out = sys.argv[1]
lines = [l.rstrip("\n") for l in open(f"{out}/train.log")]
start = float(lines[0].split()[1])
stamped = [(float(l.split(" ", 1)[0]), l.split(" ", 1)[1]) for l in lines[1:]
           if l[:1].isdigit() and " " in l]
step_t = [t for t, l in stamped if l.startswith("step ")]
plan = [t for t, l in stamped if l.startswith("hptrain: plan")]
ready = plan[-1] if plan else (stamped[0][0] if stamped else start)
io = [tuple(map(float, l.split()[:4])) for l in open(f"{out}/io.log") if len(l.split()) >= 4]
def io_at(t):
    i = min(bisect.bisect_left([s[0] for s in io], t), len(io) - 1)
    return io[i][1], io[i][2]
print(f"initialisation (allocation, random normals, the stored blocks written): {ready - start:.1f} s")
marks = [ready] + step_t
for k in range(1, len(marks)):
    print(f"step {k}: {marks[k] - marks[k - 1]:.1f} s")
if io:
    ri, wi = io_at(ready)
    print(f"disk during initialisation: read {ri / 2**20:.1f} MiB, written {wi / 2**20:.1f} MiB")
    if len(step_t) >= 2:
        r0, w0 = io_at(step_t[0]); r1, w1 = io_at(step_t[-1])
        n = len(step_t) - 1
        print(f"disk per step (steps 2..{len(step_t)}, /proc/PID/io): read {(r1 - r0) / n / 2**20:.1f} MiB, "
              f"written {(w1 - w0) / n / 2**20:.1f} MiB")
    print(f"peak sampled VmRSS {max(s[3] for s in io) / 2**20:.2f} GiB")
for t, l in stamped:
    if l.startswith(("offload:", "done:", "step ", "memory:")) or "peak RSS" in l:
        print(l.strip())
for l in open(f"{out}/time.txt"):
    if any(k in l for k in ("Maximum resident", "Elapsed", "File system", "Percent of CPU")):
        print(l.strip())
PY
}

measured_fits() {
    python3 - "$1" "$2" <<'PY'
import os, re, sys
u = {"B": 2**-30, "KiB": 2**-20, "MiB": 2**-10, "GiB": 1, "TiB": 2**10}
peak = None
for l in open(sys.argv[1]):
    if l.startswith("  peak"):
        v = re.findall(r"([0-9.]+)(?: (B|KiB|MiB|GiB|TiB))?", l[6:])
        peak = [float(x) * u[k or "B"] for x, k in v][:3]
        break
if not peak:
    sys.exit(f"no peak row in {sys.argv[1]}")
dev, host, disk = (peak + [0, 0])[:3]
st = os.statvfs(sys.argv[2])
free = st.f_bavail * st.f_frsize / 2**30
avail = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemAvailable")) / 2**20
print(f"disk: {free:.1f} GiB free in {sys.argv[2]} (plan {disk:.2f} GiB + 4); memory: {avail:.1f} GiB "
      f"available (plan {dev:.2f} GiB device + {host:.2f} GiB host + 2)")
if free < disk + 4:
    sys.exit("not enough free disk")
if avail < dev + host + 2:
    sys.exit("not enough available memory")
PY
}
