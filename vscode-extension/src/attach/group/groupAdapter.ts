import { RankGroup } from './rankGroup';

/**
 * A tiny in-process debug adapter for the parent "all ranks" session. It has no threads or breakpoints of
 * its own: launch/attach run the RankGroup (which starts the child rank sessions), disconnect/terminate
 * stop it, and the group's end becomes a `terminated` event. Implements the shape of
 * vscode.DebugAdapter (onDidSendMessage + handleMessage) without importing vscode, so it is unit-tested.
 */
export interface DapMessage {
  seq: number;
  type: string;
  command?: string;
  event?: string;
  arguments?: unknown;
  [k: string]: unknown;
}
type Listener = (m: DapMessage) => void;

export class GroupAdapter {
  private seq = 1;
  private listeners: Listener[] = [];
  private terminated = false;

  constructor(
    private group: RankGroup,
    private showError: (msg: string) => void,
  ) {
    group.ended.then((reason) => {
      this.output(`rtdebug: ${reason}\n`);
      this.sendTerminated();
    });
  }

  readonly onDidSendMessage = (l: Listener) => {
    this.listeners.push(l);
    return {
      dispose: () => {
        this.listeners = this.listeners.filter((x) => x !== l);
      },
    };
  };

  private send(m: Omit<DapMessage, 'seq'>): void {
    const msg = { ...m, seq: this.seq++ } as DapMessage;
    for (const l of this.listeners) l(msg);
  }

  private respond(req: DapMessage, body: unknown = {}, error?: string): void {
    this.send({ type: 'response', request_seq: req.seq, command: req.command, success: !error, message: error, body });
  }

  output(text: string, category = 'console'): void {
    this.send({ type: 'event', event: 'output', body: { category, output: text } });
  }

  private sendTerminated(): void {
    if (this.terminated) return;
    this.terminated = true;
    this.send({ type: 'event', event: 'terminated', body: {} });
  }

  handleMessage(m: DapMessage): void {
    if (m.type !== 'request') return;
    switch (m.command) {
      case 'initialize':
        this.respond(m, { supportsConfigurationDoneRequest: true, supportsTerminateRequest: true, supportTerminateDebuggee: true });
        this.send({ type: 'event', event: 'initialized', body: {} });
        return;
      case 'launch':
      case 'attach':
        this.respond(m);
        this.group.start().catch((e: Error) => {
          this.output(`rtdebug: ${e.message}\n`, 'stderr');
          this.showError(`rtdebug: ${e.message.split('\n')[0]}`);
          void this.group.stop().finally(() => this.sendTerminated());
        });
        return;
      case 'disconnect':
      case 'terminate':
        void this.group.stop().finally(() => {
          this.respond(m);
          this.sendTerminated();
        });
        return;
      case 'threads':
        this.respond(m, { threads: [] });
        return;
      default:
        this.respond(m);
    }
  }

  dispose(): void {
    this.listeners = [];
  }
}
