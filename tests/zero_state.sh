# tests/zero_state.sh: state_of DIR prints the path of DIR's state.bin, or, for a sharded
# checkpoint (DIR/zero.manifest: ZeRO's stages 1-2 in memory, 1-3 in the offload engine), of one
# process's state.bin put together from its shards by tests/zero_state.py (which checks that they
# hold every byte once and their CRCs) as DIR.state.bin (absent when they do not make one).
state_of() {
    if [ -f "$1/zero.manifest" ]; then
        rm -f "$1.state.bin"
        python3 "$(dirname "${BASH_SOURCE[0]}")/zero_state.py" "$1" "$1.state.bin" >&2
        echo "$1.state.bin"
    else
        echo "$1/state.bin"
    fi
}
