// Regenerates the repo's top-level .vscode/launch.json and tasks.json for the bundled examples with the
// same code path as the "Generate Launch Configurations" command (harness `vscode --json` + jsonc merge),
// so a contributor can F5 them. Entries not named "rtdebug: …" (e.g. "Run Extension") are kept.
// Usage: npm run build && node scripts/generate-repo-vscode.js [python]
const fs = require('fs');
const path = require('path');
const { generateConfigs } = require('../out/src/configs/generateCli');
const { applyGenerated } = require('../out/src/configs/launchFiles');

const repo = path.resolve(__dirname, '../..');
const python = process.argv[2] || process.env.RTDEBUG_PYTHON || path.join(repo, '.venv/bin/python');
const jobs = [
  { script: 'examples/ddp_fashion.py', mode: 'torchrun', nprocPerNode: 2, wait: 'all' },
  { script: 'examples/plain_ddp.py', mode: 'torchrun', nprocPerNode: 2, wait: 'all' },
  { script: 'examples/local_linear.py', mode: 'run' },
];

(async () => {
  const dir = path.join(repo, '.vscode');
  const read = (f) => {
    try {
      return fs.readFileSync(path.join(dir, f), 'utf8');
    } catch {
      return '';
    }
  };
  let launch = read('launch.json');
  let tasks = read('tasks.json');
  for (const j of jobs) {
    const gen = await generateConfigs({ python, module: 'rtdebug' }, j);
    ({ launch, tasks } = applyGenerated(launch, tasks, gen, j.script));
  }
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'launch.json'), launch);
  fs.writeFileSync(path.join(dir, 'tasks.json'), tasks);
  console.log(`wrote ${dir}/launch.json and tasks.json`);
})().catch((e) => {
  console.error(e.message);
  process.exit(1);
});
