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

# A kept run's checkpoint plays whole episodes of its stochastic policy (--eval-checkpoint, seeded by --seed 1, the
# default), the first one recorded: its output goes to $EVALS/eval_<label>.txt below a header that says what was
# played, the command, date and machine, and that first episode becomes $EVALS/<label>_eval.gif (made from the mp4 by
# the ffmpeg of the imageio-ffmpeg package, with the filter given: a frame rate and 16 colours keep the file small).
# Nothing is done where eval_<label>.txt is already that of the checkpoint's step.
evaluate_run() {  # evaluate_run OUT EVALS LABEL EPISODES FILTER CHECKPOINT (relative to OUT) SCRIPT [FLAG ...]
    local out=$1 evals=$2 label=$3 episodes=$4 filter=$5 checkpoint=$6 script=$7
    shift 7
    local run step words start output seconds when video ffmpeg
    run=$(basename "$(dirname "$checkpoint")")
    step=$(global_step "$out/$checkpoint" ,)
    if grep -qs "its checkpoint at step $step," "$evals/eval_$label.txt"; then
        echo "$label: evaluated at step $step already ($evals/eval_$label.txt)"
        return 0
    fi
    words=(python "$(realpath --relative-to="$out" "$script")" "$@" --eval-checkpoint "$checkpoint")
    words+=(--eval-episodes "$episodes" --capture-video)
    start=$(date +%s)
    output=$(cd "$out" && "${words[@]}")
    seconds=$(($(date +%s) - start))
    when="$(date -u +%F), $(cpu_model), $(nproc) cores"
    # the evaluation films into videos/<a name of its own>/eval: the newest such folder
    video=$(cd "$out" && ls -t videos/*/eval/rl-video-episode-0.mp4 | head -n 1)
    mkdir -p "$evals"
    ffmpeg=$(python -c 'import imageio_ffmpeg; print(imageio_ffmpeg.get_ffmpeg_exe())')
    "$ffmpeg" -loglevel error -y -i "$out/$video" -vf "$filter" "$evals/${label}_eval.gif"
    {
        echo "# $script, $run: its checkpoint at step $step, played by --eval-checkpoint"
        echo "# ($episodes episodes of its stochastic policy, seeded by --seed 1), $when, $seconds s."
        echo "# Command (in $out):"
        echo "#   ${words[*]}"
        echo "# Its output:"
        echo "$output"
        echo "# ${label}_eval.gif: episode 0 ($video), with the ffmpeg of the imageio-ffmpeg package:"
        echo "#   ffmpeg -i rl-video-episode-0.mp4 -vf \"$filter\" ${label}_eval.gif"
    } > "$evals/eval_$label.txt"
    echo "evaluated: $evals/eval_$label.txt, $evals/${label}_eval.gif"
}

eval_summary() {  # eval_summary RECORD: the evaluation record's summary, as "415.50 ± 12.56 over 10 episodes"
    sed -n 's/^.*: mean return \(.*\) +- \(.*\) over \(.*\) episodes$/\1 ± \2 over \3 episodes/p' "$1"
}

global_step() {  # global_step CHECKPOINT [,]: the step the checkpoint was saved at (with "," between thousands)
    local code='import sys, torch; step = torch.load(sys.argv[1], weights_only=True)["global_step"]'
    python -c "$code; print(format(step, sys.argv[2]))" "$1" "${2:-}"
}

cpu_model() {  # the CPU's model name, as benchmark/run.py records it for a run
    python -c 'import sys; sys.path.insert(0, "benchmark"); import run; print(run.cpu_model())'
}
