# tests/zero_lib.sh: what the ZeRO tests share (test_zero.sh, test_zero_fault.sh,
# test_zero_arch.sh); source it after lib.sh. same_run DIR_A DIR_B WHAT: state.bin and the saved
# model byte for byte. shards_are DIR STATE WHAT: DIR's shards (its zero.manifest's), their weights and state buffers put where
# their pieces say (tests/zero_state.py: every byte held once, the CRCs checked),
# are STATE's (a stage-0 state.bin) byte for byte, and the manifest's header fields are STATE's.
. "$(dirname "${BASH_SOURCE[0]}")/zero_state.sh" # state_of
same_run() { # the saved model too: model.bin (llm.c's, GPT-2) or model.safetensors (the others)
    cmp -s "$(state_of "$1")" "$(state_of "$2")" || bad "$3: state.bin differs"
    local f n=0
    for f in model.bin model.safetensors; do
        [ -e "$1/$f" ] || [ -e "$2/$f" ] || continue
        n=$((n + 1))
        cmp -s "$1/$f" "$2/$f" || bad "$3: $f differs"
    done
    [ $n -gt 0 ] || bad "$3: no saved model"
}
shards_are() {
    rm -f "$1.body"
    python3 "$(dirname "${BASH_SOURCE[0]}")/zero_state.py" "$(state_dir_of "$1")" "$1.body" --body
    python3 - "$1.body" "$2" <<'PY' || bad "$3: the shards are not the one-process state"
import os, struct, sys
if not os.path.exists(sys.argv[1]): sys.exit(1)
a, state = (open(p, "rb").read() for p in sys.argv[1:3])
# a: the manifest's 32 header fields, then the weights and state buffers put together
ok = a[:256] == state[16:272] and state[272:272 + len(a) - 256] == a[256:]
print("%s: %d bytes of weights and state from the shards: %s" % (sys.argv[2], len(a) - 256, "same" if ok else "DIFFERENT"))
sys.exit(0 if ok else 1)
PY
}
