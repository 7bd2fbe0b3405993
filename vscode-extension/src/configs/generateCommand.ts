import * as path from 'path';
import * as vscode from 'vscode';
import { Gated, PYTHON_EXTENSION_ID } from '../common/constants';
import { applyGenerated } from './launchFiles';
import { generateConfigs, GenerateOptions } from './generateCli';
import { checkGenerateOptions, splitHosts, validateHosts, validatePort, validatePositiveInt } from './generateInputs';
import { checkWait, checkWith, refusal } from '../common/harnessCheck';
import { currentHarness } from '../common/harnessCommand';
import { resolvePython } from '../common/interpreter';
import { readSettings } from '../common/settings';
import { ensureTrusted } from '../common/workspaceTrust';

/**
 * "Generate Launch Configurations": asks for the script and the job shape (or takes them as command
 * arguments), has the harness generate the entries (`python -m rtdebug vscode … --json`, the one source of
 * truth for their shape), and merges them into .vscode/launch.json and tasks.json with jsonc edits.
 */
export async function generateLaunchConfigurations(args?: Partial<GenerateOptions> & { folder?: string }): Promise<void> {
  if (!ensureTrusted(Gated.generate)) return;
  try {
    const folder = pickFolder(args?.folder);
    if (!folder) return void vscode.window.showErrorMessage('rtdebug: open a folder first; the configurations go into its .vscode/.');
    const opts = args?.script ? checkGenerateOptions(args) : await prompt(folder);
    if (!opts) return;
    // With the Python extension the task keeps the harness default `${command:python.interpreterPath}`
    // (portable); without it (code-server, VSCodium) that command does not exist, so write the path as the
    // user set it (the task runs in the workspace folder, so a relative one stays right there).
    const taskPython = vscode.extensions.getExtension(PYTHON_EXTENSION_ID) ? undefined : await resolvePython(folder.uri);
    const gen = await generateConfigs(await currentHarness(Gated.generate, folder), { ...opts, python: taskPython });
    const dir = vscode.Uri.joinPath(folder.uri, '.vscode');
    const launchUri = vscode.Uri.joinPath(dir, 'launch.json');
    const tasksUri = vscode.Uri.joinPath(dir, 'tasks.json');
    const [launch, tasks] = await Promise.all([readText(launchUri), readText(tasksUri)]);
    const out = applyGenerated(launch, tasks, gen, opts.script);
    await vscode.workspace.fs.createDirectory(dir);
    if (out.launch !== launch) await vscode.workspace.fs.writeFile(launchUri, Buffer.from(out.launch));
    if (out.tasks !== tasks) await vscode.workspace.fs.writeFile(tasksUri, Buffer.from(out.tasks));
    const n = gen.configurations.length + gen.compounds.length;
    void vscode.window.showInformationMessage(
      `rtdebug: ${n} launch entries for ${opts.script} written to .vscode/ (${out.launch === launch && out.tasks === tasks ? 'already up to date' : 'updated'}).`,
    );
  } catch (e) {
    void vscode.window.showErrorMessage(`rtdebug: ${(e as Error).message}`);
  }
}

function pickFolder(fsPath?: string): vscode.WorkspaceFolder | undefined {
  const folders = vscode.workspace.workspaceFolders ?? [];
  if (fsPath) return folders.find((f) => f.uri.fsPath === fsPath) ?? folders[0];
  const active = vscode.window.activeTextEditor?.document.uri;
  return (active && vscode.workspace.getWorkspaceFolder(active)) || folders[0];
}

async function readText(uri: vscode.Uri): Promise<string> {
  try {
    return Buffer.from(await vscode.workspace.fs.readFile(uri)).toString('utf8');
  } catch {
    return '';
  }
}

async function prompt(folder: vscode.WorkspaceFolder): Promise<GenerateOptions | undefined> {
  const title = 'rtdebug: generate launch configurations';
  const files = await vscode.workspace.findFiles(
    new vscode.RelativePattern(folder, '**/*.py'),
    '**/{.venv,venv,node_modules,.git,site-packages}/**',
    500,
  );
  const active = vscode.window.activeTextEditor?.document.uri.fsPath;
  const items = files
    .map((f) => path.relative(folder.uri.fsPath, f.fsPath))
    .sort()
    .map((rel) => ({ label: rel, picked: active === path.join(folder.uri.fsPath, rel) }));
  items.sort((a, b) => Number(b.picked) - Number(a.picked));
  const script = (await vscode.window.showQuickPick(items, { title: `${title} (1/5): training script` }))?.label;
  if (!script) return undefined;
  const mode = (
    await vscode.window.showQuickPick(
      [
        { label: 'torchrun', description: 'several ranks: one attach config per rank + "All ranks" compound' },
        { label: 'run', description: 'single process: F5 launches the script under the harness' },
      ],
      { title: `${title} (2/5): how the job runs` },
    )
  )?.label as GenerateOptions['mode'] | undefined;
  if (!mode) return undefined;
  const s = readSettings(folder.uri);
  const o: GenerateOptions = { script, mode };
  if (mode === 'torchrun') {
    const nproc = await vscode.window.showInputBox({
      title: `${title} (3/5)`,
      prompt: '--nproc-per-node',
      value: '2',
      validateInput: (v) => validatePositiveInt(v, 'nproc per node'),
    });
    if (nproc === undefined) return undefined;
    const nnodes = await vscode.window.showInputBox({
      title: `${title} (3/5)`,
      prompt: '--nnodes',
      value: '1',
      validateInput: (v) => validatePositiveInt(v, 'nnodes'),
    });
    if (nnodes === undefined) return undefined;
    o.nprocPerNode = Number(nproc);
    o.nnodes = Number(nnodes);
    if (o.nnodes > 1) {
      const hosts = await vscode.window.showInputBox({
        title: `${title} (3/5)`,
        prompt: `hosts of the ${o.nnodes} nodes, comma-separated (node 0 first)`,
        validateInput: (v) => validateHosts(v, o.nnodes ?? 1),
      });
      if (hosts === undefined) return undefined;
      o.hosts = splitHosts(hosts);
    }
  }
  const base = await vscode.window.showInputBox({
    title: `${title} (4/5)`,
    prompt: 'debug port base (rank N listens on base + N)',
    value: String(s.portBase),
    validateInput: validatePort,
  });
  if (base === undefined) return undefined;
  o.portBase = Number(base);
  const check = checkWith(await currentHarness(Gated.generate, folder));
  const wait = await vscode.window.showInputBox({
    title: `${title} (5/5)`,
    prompt: 'wait policy: ranks that block until a debugger attaches (none, all, 0,2-3)',
    value: s.wait,
    validateInput: (v) => refusal(checkWait(check, v)),
  });
  if (wait === undefined) return undefined;
  o.wait = wait.trim();
  return o;
}
