import { ENTRY_PREFIX } from '../common/constants';
import * as jsonc from 'jsonc-parser';
import { mergeNamedEntries } from './jsoncMerge';

/** What `python -m rtdebug vscode ... --json` prints: the one source of truth for generated entries. */
export interface GeneratedConfigs {
  configurations: Record<string, unknown>[];
  compounds: Record<string, unknown>[];
  tasks: Record<string, unknown>[];
  inputs: Record<string, unknown>[];
}

export const EMPTY_LAUNCH = '{\n\t"version": "0.2.0",\n\t"configurations": []\n}\n';
export const EMPTY_TASKS = '{\n\t"version": "2.0.0",\n\t"tasks": []\n}\n';

/**
 * Which entries a run for `script` may remove when it no longer generates them: ours (prefix), and either
 * naming this script or script-independent (the per-rank attach configs) — never another script's compound
 * or task, and never a config a remaining compound still lists, so generating for a second script keeps
 * the first one working. Script-independent entries are only removed by a run that generates some itself
 * (torchrun), not by a single-process one.
 */
export function removablePolicy(script: string, keptCompoundRefs: Set<string>, sharedToo = true): (name: string) => boolean {
  const perScript = (name: string) => /\.py\b/.test(name);
  return (name) => name.startsWith(ENTRY_PREFIX) && !keptCompoundRefs.has(name) && (perScript(name) ? name.includes(script) : sharedToo);
}

function compoundRefs(launch: string): Set<string> {
  const v = (jsonc.parse(launch) ?? {}) as { compounds?: { configurations?: unknown[] }[] };
  return new Set(
    (v.compounds ?? []).flatMap((c) =>
      (c.configurations ?? []).map((x) => (typeof x === 'string' ? x : String((x as { name?: string }).name))),
    ),
  );
}

export function parseGenerated(stdout: string): GeneratedConfigs {
  let v: Record<string, unknown>;
  try {
    v = JSON.parse(stdout);
  } catch {
    throw new Error(`the harness printed no JSON: ${stdout.slice(0, 200)}`);
  }
  const list = (k: string) => {
    const x = v[k] ?? [];
    if (!Array.isArray(x)) throw new Error(`harness output: "${k}" is not a list`);
    return x as Record<string, unknown>[];
  };
  return { configurations: list('configurations'), compounds: list('compounds'), tasks: list('tasks'), inputs: list('inputs') };
}

/**
 * Merges the generated entries for `script` into launch.json / tasks.json text (empty text = no file yet).
 * Inputs (ids, not names) are added or replaced but never removed: other configs may use them.
 */
export function applyGenerated(
  launchText: string,
  tasksText: string,
  gen: GeneratedConfigs,
  script: string,
): { launch: string; tasks: string } {
  let launch = launchText.trim() ? launchText : EMPTY_LAUNCH;
  launch = mergeNamedEntries(
    launch,
    { key: 'compounds', nameKey: 'name', entries: gen.compounds, owned: removablePolicy(script, new Set()) },
    'launch.json',
  );
  const refs = compoundRefs(launch);
  const shared = gen.configurations.some((c) => !/\.py\b/.test(String(c.name)));
  launch = mergeNamedEntries(
    launch,
    { key: 'configurations', nameKey: 'name', entries: gen.configurations, owned: removablePolicy(script, refs, shared) },
    'launch.json',
  );
  launch = mergeNamedEntries(launch, { key: 'inputs', nameKey: 'id', entries: gen.inputs, owned: () => false }, 'launch.json');
  let tasks = tasksText;
  if (gen.tasks.length || tasksText.trim()) {
    tasks = mergeNamedEntries(
      tasksText.trim() ? tasksText : EMPTY_TASKS,
      { key: 'tasks', nameKey: 'label', entries: gen.tasks, owned: removablePolicy(script, new Set()) },
      'tasks.json',
    );
  }
  return { launch, tasks };
}
