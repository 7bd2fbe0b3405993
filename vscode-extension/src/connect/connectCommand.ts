import * as vscode from 'vscode';
import { ChildProcess, execFile, spawn } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { neutralCwd } from '../common/cliPaths';
import { currentHarness } from '../common/harnessCommand';
import { ensureTrusted } from '../common/workspaceTrust';
import { connectArgs, parseRemoteSessions, sshConfigHosts, sshConfigOverride } from './connectModel';

const COMMAND = 'rtdebug.connectToJob';
const WHAT = 'Connect to a Job on Another Machine';

/**
 * "rtdebug: Connect to a Job on Another Machine…": a host of ~/.ssh/config (or any typed one), that host's
 * live sessions (its `rtdebug ps --json`, through the same system ssh, BatchMode), then `rtdebug connect HOST
 * --session ID` kept running in the background: its ranks appear in the Ranks view like local ones. Ended
 * (SIGTERM: every tunnel closes) when the extension stops or on the next connect. Works the same in a
 * Remote-SSH window (then it runs on the remote machine, whose ssh reaches the job's nodes).
 */
export function registerConnect(context: vscode.ExtensionContext, log: vscode.OutputChannel): void {
  let child: ChildProcess | undefined;
  const end = () => {
    if (child && child.exitCode === null) child.kill('SIGTERM');
    child = undefined;
  };
  context.subscriptions.push({ dispose: end });
  context.subscriptions.push(
    vscode.commands.registerCommand(COMMAND, async () => {
      if (!ensureTrusted(WHAT)) return;
      const host = await pickHost();
      if (!host) return;
      const remote = await vscode.window.showInputBox({
        title: `rtdebug: how ${host} runs rtdebug over ssh`,
        value: 'rtdebug',
        prompt: 'a command on its PATH, or a path such as ~/venv/bin/rtdebug',
      });
      if (!remote) return;
      try {
        const sshConfig = userSshConfig();
        const listed = await sshList(host, remote, sshConfig);
        const sessions = parseRemoteSessions(listed);
        if (!sessions.length) {
          void vscode.window.showInformationMessage(`rtdebug: no live rtdebug session on ${host}.`);
          return;
        }
        const pick = await vscode.window.showQuickPick(
          sessions.map((s) => ({
            label: s.sessionId,
            description: `${s.ranks} ranks · ${s.script}${s.verified ? '' : ' · unverified'}`,
            s,
          })),
          { title: `rtdebug: connect to which session on ${host}?` },
        );
        if (!pick) return;
        end();
        const harness = await currentHarness(WHAT);
        const argv = ['-m', harness.module, ...connectArgs(host, pick.s.sessionId, remote, sshConfig)];
        log.appendLine(`rtdebug: ${harness.python} ${argv.join(' ')}`);
        const proc = spawn(harness.python, argv, { cwd: neutralCwd(), env: harness.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
        child = proc;
        let tail = ''; // the line can arrive split over two chunks
        let announced = false;
        proc.stdout?.on('data', (d: Buffer) => {
          log.append(d.toString());
          tail = (tail + d.toString()).slice(-4096);
          if (!announced && tail.includes('rtdebug: connected')) {
            announced = true;
            void vscode.commands.executeCommand('rtdebug.ranks.refresh');
            void vscode.commands.executeCommand('rtdebug.showRanks');
            void vscode.window.showInformationMessage(
              `rtdebug: connected to ${pick.s.sessionId} on ${host}; its ranks are in the Ranks view.`,
            );
          }
        });
        proc.stderr?.on('data', (d: Buffer) => log.append(d.toString()));
        proc.on('exit', (code) => {
          void vscode.commands.executeCommand('rtdebug.ranks.refresh');
          if (code) void vscode.window.showErrorMessage(`rtdebug: connect to ${host} ended (exit ${code}); see the rtdebug output.`);
        });
      } catch (e) {
        void vscode.window.showErrorMessage(`rtdebug: ${(e as Error).message}`);
      }
    }),
  );
}

async function pickHost(): Promise<string | undefined> {
  let hosts: string[];
  try {
    hosts = sshConfigHosts(fs.readFileSync(path.join(os.homedir(), '.ssh', 'config'), 'utf8'));
  } catch {
    hosts = [];
  }
  const other = 'Another host…';
  const pick = await vscode.window.showQuickPick([...hosts, other], { title: 'rtdebug: which machine of the job?' });
  if (pick !== other) return pick;
  const typed = await vscode.window.showInputBox({
    title: 'rtdebug: host (as ssh takes it)',
    validateInput: (v) => (/^[A-Za-z0-9_.@-]{1,255}$/.test(v) && !v.startsWith('-') ? undefined : 'a host name, alias or address'),
  });
  return typed || undefined;
}

/** The ~/.ssh/config the hosts were offered from, when ssh itself would read another one (sshConfigOverride). */
function userSshConfig(): string | undefined {
  let passwdHome: string | undefined;
  try {
    passwdHome = os.userInfo().homedir;
  } catch {
    passwdHome = undefined; // no passwd entry: ssh falls back to $HOME itself
  }
  return sshConfigOverride(os.homedir(), passwdHome, (f) => fs.existsSync(f));
}

function sshList(host: string, remote: string, sshConfig: string | undefined): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      'ssh',
      [...(sshConfig ? ['-F', sshConfig] : []), '-o', 'BatchMode=yes', '-T', host, '--', `${remote} ps --json`],
      { cwd: neutralCwd(), timeout: 60000, maxBuffer: 8 << 20 },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`${host}: ${String(stderr).trim().split('\n').pop() || err.message}`));
        else resolve(String(stdout));
      },
    );
  });
}
