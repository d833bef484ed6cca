# tests/zero_state.sh: state_of DIR prints the path of DIR's state.bin, or, for a sharded
# checkpoint (DIR/zero.manifest: ZeRO's stages 1-2 in memory, 1-3 in the offload engine), of one
# process's state.bin put together from its shards by tests/zero_state.py (which checks that they
# hold every byte once and their CRCs) as DIR.state.bin (absent when they do not make one).
# state_dir_of DIR: where a save to DIR put its state: DIR.state beside a Hugging Face DIR
# (src/train/save_dir.c), else DIR.
state_dir_of() {
    if [ -f "$1.state/state.bin" ] || [ -f "$1.state/zero.manifest" ]; then echo "$1.state"; else echo "$1"; fi
}
state_of() {
    local d
    d=$(state_dir_of "$1")
    if [ -f "$d/zero.manifest" ]; then
        rm -f "$1.state.bin"
        python3 "$(dirname "${BASH_SOURCE[0]}")/zero_state.py" "$d" "$1.state.bin" >&2
        echo "$1.state.bin"
    else
        echo "$d/state.bin"
    fi
}
