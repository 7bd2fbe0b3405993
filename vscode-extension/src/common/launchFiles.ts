import { ENTRY_PREFIX } from '../constants';
import { mergeNamedEntries } from './jsoncMerge';

/** What `python -m harness vscode ... --json` prints: the one source of truth for generated entries. */
export interface GeneratedConfigs {
  configurations: Record<string, unknown>[];
  compounds: Record<string, unknown>[];
  tasks: Record<string, unknown>[];
  inputs: Record<string, unknown>[];
}

export const EMPTY_LAUNCH = '{\n\t"version": "0.2.0",\n\t"configurations": []\n}\n';
export const EMPTY_TASKS = '{\n\t"version": "2.0.0",\n\t"tasks": []\n}\n';

const owned = (name: string) => name.startsWith(ENTRY_PREFIX);
/** Inputs have ids, not names; the harness names them rtdebug… too. */
const ownedInput = (id: string) => owned(id) || /^rtdebug/i.test(id);

export function parseGenerated(stdout: string): GeneratedConfigs {
  let v: Record<string, unknown>;
  try { v = JSON.parse(stdout); } catch { throw new Error(`the harness printed no JSON: ${stdout.slice(0, 200)}`); }
  const list = (k: string) => {
    const x = v[k] ?? [];
    if (!Array.isArray(x)) throw new Error(`harness output: "${k}" is not a list`);
    return x as Record<string, unknown>[];
  };
  return { configurations: list('configurations'), compounds: list('compounds'), tasks: list('tasks'), inputs: list('inputs') };
}

/** Merges the generated entries into launch.json / tasks.json text (empty text = file does not exist yet). */
export function applyGenerated(launchText: string, tasksText: string, gen: GeneratedConfigs): { launch: string; tasks: string } {
  let launch = launchText.trim() ? launchText : EMPTY_LAUNCH;
  launch = mergeNamedEntries(launch, { key: 'configurations', nameKey: 'name', entries: gen.configurations, owned }, 'launch.json');
  launch = mergeNamedEntries(launch, { key: 'compounds', nameKey: 'name', entries: gen.compounds, owned }, 'launch.json');
  launch = mergeNamedEntries(launch, { key: 'inputs', nameKey: 'id', entries: gen.inputs, owned: ownedInput }, 'launch.json');
  let tasks = tasksText;
  if (gen.tasks.length || tasksText.trim()) {
    tasks = mergeNamedEntries(tasksText.trim() ? tasksText : EMPTY_TASKS, { key: 'tasks', nameKey: 'label', entries: gen.tasks, owned }, 'tasks.json');
  }
  return { launch, tasks };
}
