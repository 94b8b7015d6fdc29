# Call 12: where wheel G (034309b, consumer signals) hangs: one key block per SM at most, then more
# key blocks than SMs (a second tile per persistent block), each under a 25 s timeout.
set -uo pipefail
R=$(mktemp -d)
. bench/gpu_python_env.sh
export PYTHONPATH="/tmp/siteG:$PYTHONPATH"
python3 -m pip install -q --no-deps --target /tmp/siteG .carry/pythonG/kittens-*.whl
for shape in "1 1 256" "1 1 300" "1 16 1024" "1 2 9000" "2 40 1024"; do
  timeout 25 python3 bench/results/h100-2026-11-26-bwdtimes/call12/probe.py $shape >> "$R/probe.txt" 2>&1; echo "$shape rc $?" | tee -a "$R/probe.txt"
done
grep -v Warn "$R/probe.txt" | grep -E "finished|rc" 
tar -C "$R" -czf "$OUT/results.tgz" .
