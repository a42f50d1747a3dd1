# Runs that outlive the machine, for the sweeps that take several sessions (breakout.sh, microrts.sh source this).
# A new machine keeps nothing gitignored, so at the end of a session `KEEP=1 bash benchmark/<sweep>.sh` copies what
# the sweep's $OUT holds into $KEPT, to commit: each run's args.json, event files and checkpoint, and run.py's state
# files and logs (a resumed run's log goes on in the same file, so the log a report names exists on every machine).
# Started where $OUT/runs is missing, the sweep copies them back first: done runs count, the others continue from
# their checkpoints. A done run's checkpoint is wanted only by --eval-checkpoint, so it shrinks to what that reads
# (without the optimizer's state: about a third of the file), in $OUT too, so that once committed it stays unchanged.

copy_runs() {  # copy_runs FROM TO
    local dir
    for dir in "$1"/runs/*/ "$1"/state_*/; do
        [ -d "$dir" ] || continue
        dir=${dir%/}
        mkdir -p "$2/${dir#"$1"/}"
        find "$dir" -maxdepth 1 -type f \( -name "*.json" -o -name "events.out.tfevents.*" -o -name "*.pt" \
            -o -name "*.log" \) -exec cp -p {} "$2/${dir#"$1"/}/" \;
    done
}

keep_runs() {  # keep_runs OUT KEPT
    python - "$1" <<'PY'
import json, pathlib, sys
import torch
out = pathlib.Path(sys.argv[1])
for state in sorted(out.glob("state_*/*.json")):
    state = json.loads(state.read_text())
    for name in state.get("run_names", []) if state.get("status") == "done" else []:
        for path in (out / "runs" / name).glob("*.pt"):
            checkpoint = torch.load(path, weights_only=True)
            if checkpoint.pop("optimizer", None) is not None:
                torch.save(checkpoint, path)
PY
    copy_runs "$1" "$2"
    echo "kept in $2: $(find "$2" -type f | wc -l) files; commit them"
}
