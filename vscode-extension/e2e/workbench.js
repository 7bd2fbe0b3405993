// Helpers that drive the VS Code workbench in a headless chromium page (playwright-core).
const fs = require('fs');
const path = require('path');

const root = process.env.E2E_ROOT;
const { chromium } = require(path.join(root, 'node_modules', 'playwright-core'));

async function openWorkbench(url) {
  const udd = fs.mkdtempSync(path.join(root, 'chrome-udd-'));
  const ctx = await chromium.launchPersistentContext(udd, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1400, height: 900 },
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-dev-shm-usage',
    ],
  });
  const page = ctx.pages()[0] || (await ctx.newPage());
  await page.goto(url, { waitUntil: 'domcontentloaded', timeout: 90000 });
  await page.waitForSelector('.monaco-workbench .statusbar', { timeout: 120000 });
  await page.waitForTimeout(4000);
  return {
    page,
    close: async () => {
      await ctx.close();
      fs.rmSync(udd, { recursive: true, force: true });
    },
  };
}

const widget = (page) => page.locator('.quick-input-widget');

/** F1, type the title, click the row that has it (Enter alone can pick the wrong row). */
async function runCommand(page, title) {
  // Under load the palette can lose focus and close while typing (a terminal or webview taking focus):
  // try again, up to three times.
  for (let attempt = 1; ; attempt++) {
    await page.keyboard.press('Escape');
    await page.keyboard.press('F1');
    await page.waitForSelector('.quick-input-widget input', { state: 'visible', timeout: 20000 });
    await page.keyboard.type(title, { delay: 15 });
    const row = widget(page).locator('.monaco-list-row', { hasText: title }).first();
    try {
      await row.waitFor({ state: 'visible', timeout: attempt < 3 ? 15000 : 30000 });
    } catch (e) {
      if (attempt >= 3) throw e;
      continue;
    }
    await row.click();
    return;
  }
}

/** Wait until the quick input shows `text` (its title, prompt or a row). */
async function waitQuickInput(page, text, timeout = 30000) {
  const end = Date.now() + timeout;
  while (Date.now() < end) {
    const w = widget(page);
    if ((await w.isVisible()) && (await w.innerText()).includes(text)) return;
    await page.waitForTimeout(200);
  }
  throw new Error(`quick input never showed "${text}"`);
}

/** Pick a quick-pick row: type to filter, click the row with `label`. */
async function pick(page, step, label) {
  await waitQuickInput(page, step);
  await page.keyboard.type(label, { delay: 15 });
  const row = widget(page).locator('.monaco-list-row', { hasText: label }).first();
  await row.waitFor({ state: 'visible', timeout: 20000 });
  await row.click();
}

/** Answer an input box: wait for its prompt, replace the (pre-selected) value, Enter. */
async function answer(page, promptText, value) {
  await waitQuickInput(page, promptText);
  if (value !== undefined) {
    await page.keyboard.press('Control+A');
    await page.keyboard.type(String(value), { delay: 15 });
  }
  await page.keyboard.press('Enter');
  await page.waitForTimeout(400);
}

async function notificationsText(page) {
  const t = page.locator('.notifications-toasts');
  return (await t.count()) ? t.innerText() : '';
}

async function statusBarText(page) {
  return page.locator('.statusbar').innerText();
}

async function waitFor(what, f, timeout, interval = 500) {
  const end = Date.now() + timeout;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${timeout / 1000}s waiting for ${what}`);
    await new Promise((r) => setTimeout(r, interval));
  }
}

/** `p`, or `fallback` after `ms`; the timer is cleared so it never keeps the process alive. */
async function withTimeout(p, ms, fallback) {
  let timer;
  try {
    return await Promise.race([
      p,
      new Promise((r) => {
        timer = setTimeout(() => r(fallback), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

module.exports = { withTimeout, notificationsText, openWorkbench, runCommand, pick, answer, waitQuickInput, statusBarText, waitFor };

/** The Ranks view's row whose accessible label starts with `prefix` (e.g. "rank 1,"). */
function viewRow(page, prefix) {
  return page.locator(`.pane-body .monaco-list-row[aria-label^="${prefix}"]`).first();
}

/** Hover a view row and click its inline action (the button labelled with the command title). */
async function clickRowAction(page, prefix, title) {
  const row = viewRow(page, prefix);
  await row.waitFor({ state: 'visible', timeout: 30000 });
  await row.hover();
  const btn = row.locator(`.action-label[aria-label="${title}"]`);
  await btn.waitFor({ state: 'visible', timeout: 10000 });
  await btn.click();
}

module.exports.viewRow = viewRow;
module.exports.clickRowAction = clickRowAction;

/** Is process `pid` alive (signal 0)? */
const alive = (pid) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};
module.exports.alive = alive;
