import { execFile } from 'child_process';
import { describeFailure, HarnessCommand } from './common/harnessCli';

/** Fails with a clear message unless `python` can import the harness module. */
export function checkHarnessInstalled(cmd: HarnessCommand): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(cmd.python, ['-c', `import ${cmd.module}`], { env: cmd.env, timeout: 30000 }, (err, _out, stderr) => {
      if (!err) return resolve();
      reject(new Error(describeFailure(cmd, [], err, stderr)));
    });
  });
}
