// The status page in a real browser: Debian's chromium, headless, driven by
// playwright-core against a running `vergence serve` (started by
// cli/tests/browser.rs, which passes what is needed in the environment):
//
//   VERGENCE_URL    the server's base URL
//   VERGENCE_TOKEN  an admin token of application shop
//   VERSION         the release pushed to every service, which prod waits
//                   to have approved
//   CHROMIUM        the browser binary (default /usr/bin/chromium)
//   SCREENSHOT      where to write the screenshot of the converged matrix
//   PLAYWRIGHT_DIR  the npm prefix playwright-core is installed under
//
// It checks what an operator does: open the page, give the token, see the
// release channel × service matrix, approve prod, watch it converge without
// a reload, and read one instance's explanation, jobs and events. Any
// failure exits non-zero with the reason on stderr.

import { createRequire } from 'node:module';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';

const url = need('VERGENCE_URL');
const token = need('VERGENCE_TOKEN');
const screenshot = need('SCREENSHOT');
const release = need('VERSION');
const chromium = process.env.CHROMIUM || '/usr/bin/chromium';
const require = createRequire(join(need('PLAYWRIGHT_DIR'), 'package.json'));
const playwright = require('playwright-core');

const CHANNELS = ['staging', 'prod'];
/** Long enough for the quickstart's jobs on a loaded 2-core machine. */
const CONVERGE_MS = 120_000;

function need(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

function check(condition, message) {
  if (!condition) throw new Error(message);
}

/** The API, as the test's own second witness next to the page. */
async function api(path, init = {}) {
  const response = await fetch(new URL(path, url), {
    ...init,
    headers: { Authorization: `Bearer ${token}`, ...(init.headers || {}) },
  });
  const body = await response.json();
  check(response.ok, `${path}: ${response.status} ${JSON.stringify(body)}`);
  return body;
}

async function status() {
  return (await api('/v1/applications/shop/status')).instances;
}

const browser = await playwright.chromium.launch({
  executablePath: chromium,
  headless: true,
  // Root in a container: chromium's sandbox needs user namespaces.
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
const problems = [];
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  // Anything the CSP blocks, and any script error, fails the test.
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(`console error: ${m.text()}`);
  });
  page.on('dialog', (d) => d.accept());

  // `/` leads to the page, which asks for a token first.
  await page.goto(url);
  check(new URL(page.url()).pathname === '/ui/', `/ did not lead to /ui/: ${page.url()}`);
  await page.locator('#login').waitFor({ state: 'visible' });
  await page.fill('#token', token);
  await page.click('#login-form button[type=submit]');

  // The matrix: every instance the API knows, in both channels.
  const instances = await status();
  const services = [...new Set(instances.map((i) => i.service))];
  check(services.length > 0, 'the API lists no instances');
  for (const service of services) {
    for (const channel of CHANNELS) {
      await page.locator(`#cell-${service}-${channel}`).waitFor({ timeout: 10_000 });
    }
  }
  const headers = await page.locator('#matrix thead th').allTextContents();
  check(
    JSON.stringify(headers) === JSON.stringify(['Service', ...CHANNELS]),
    `matrix columns: ${JSON.stringify(headers)}`,
  );
  check(
    (await page.locator('#matrix td.cell').count()) === services.length * CHANNELS.length,
    'one cell per service and channel',
  );
  check((await page.locator('#app-title').textContent()) === 'shop', 'the application is named');

  // prod waits for the manual approval gate, and the page says so: nothing
  // else would let it converge.
  for (const service of services) {
    const cell = page.locator(`#cell-${service}-prod`);
    await cell.locator('[data-status=WAITING_APPROVAL]').waitFor({ timeout: CONVERGE_MS });
    await cell.locator('.versions').filter({ hasText: `desired ${release} ·` }).waitFor({ timeout: CONVERGE_MS });
  }
  for (const i of await status()) {
    if (i.releaseChannel === 'prod') {
      check(i.status === 'WAITING_APPROVAL', `API: ${i.service}/prod is ${i.status}`);
      check(i.desiredVersion === release, `API: ${i.service}/prod wants ${i.desiredVersion}`);
      check(i.currentVersion !== release, `API: ${i.service}/prod already runs ${release}`);
    }
  }

  // Approve each prod instance from the page.
  for (const service of services) {
    await page.locator(`#cell-${service}-prod button[data-action=approve]`).click();
    await page.locator('#action-result.result').filter({ hasText: `approve ${service} in prod` }).waitFor();
  }

  // prod converges, seen live in the page (no reload) …
  for (const service of services) {
    await page
      .locator(`#cell-${service}-prod [data-status=CONVERGED]`)
      .waitFor({ timeout: CONVERGE_MS });
  }
  // … and in the API.
  for (const i of await status()) {
    check(i.status === 'CONVERGED', `API: ${i.service}/${i.releaseChannel} is ${i.status}`);
    check(i.currentVersion === release, `API: ${i.service}/${i.releaseChannel} runs ${i.currentVersion}`);
  }
  const events = (await api('/v1/applications/shop/events?releaseChannel=prod')).events;
  const approvals = events.filter((e) => e.type === 'approvalRecorded' && e.version === release);
  check(approvals.length === services.length, `approvals recorded: ${approvals.length}`);
  check(approvals.every((e) => e.actor.startsWith('api:token-')), 'approvals name the token');

  // The delivery metrics panel, read again with the page: what the API
  // measures now that everything converged.
  const metrics = await api('/v1/applications/shop/metrics?since=30d');
  check(metrics.releases === services.length, `releases measured: ${JSON.stringify(metrics)}`);
  await page.reload();
  await page
    .locator('#metrics [data-metric=deployment-frequency] .from')
    .filter({ hasText: `${metrics.deployments} deployment(s) to prod` })
    .waitFor({ timeout: 10_000 });
  check((await page.locator('#metrics .metric').count()) === 4, 'the four delivery measures');
  const failures = await page.locator('#metrics [data-metric=change-failure-rate] .from').textContent();
  check(failures === `0 of ${services.length} release(s) failed`, `change failure rate: ${failures}`);
  const lead = await page.locator('#metrics [data-metric=lead-time] .from').textContent();
  check(lead.endsWith(`${services.length} release(s) deployed`), `lead time: ${lead}`);

  mkdirSync(dirname(screenshot), { recursive: true });
  await page.screenshot({ path: screenshot });

  // One instance, by the link a notification would carry: its explanation,
  // jobs and events, and the approval among them.
  const web = services.includes('web') ? 'web' : services[0];
  await page.goto(new URL(`/ui/instances/shop/prod/${web}`, url).href);
  await page.locator('#instance[data-status=CONVERGED]').waitFor();
  const explain = await page.locator('#explain').textContent();
  check(explain.includes('gates, in order'), `explain chain: ${explain}`);
  check(explain.includes('✓ manualApproval prod-gate'), `explain names the approval gate: ${explain}`);
  check((await page.locator('#jobs .job').count()) > 0, 'the last jobs are listed');
  const summary = await page.locator('#instance-summary').textContent();
  check(summary.includes(`current ${release}`) && !summary.includes('null'), `instance summary: ${summary}`);
  await page.locator('#instance-events li[data-type=approvalRecorded]').waitFor();

  // What web's getInfo printed, as printed: its link a link that opens
  // apart from the page, its markup text.
  const link = page.locator('#info pre a');
  await link.waitFor({ timeout: CONVERGE_MS });
  const console_ = `https://console.example.com/services/${web}?env=prod`;
  check((await link.getAttribute('href')) === console_, `info link: ${await link.getAttribute('href')}`);
  check((await link.textContent()) === console_, `info link text: ${await link.textContent()}`);
  check((await link.getAttribute('rel')) === 'noopener noreferrer nofollow', 'the link opens apart from the page');
  check((await page.locator('#info pre a').count()) === 1, 'only the http(s) URL is a link');
  check((await page.locator('#info b, #info img').count()) === 0, 'markup in info is not markup');
  const info = await page.locator('#info pre').textContent();
  check(info.includes(`Console: ${console_}.\n<b>not bold</b> <img src=x onerror=alert(1)>`), `info as printed: ${info}`);

  // Pause and resume from the instance page, checked in the API.
  await page.click('#pause');
  await page.locator('#resume:not([hidden])').waitFor();
  const paused = await api(`/v1/applications/shop/services/${web}/release-channels/prod`);
  check(paused.paused && paused.paused.actor.startsWith('api:token-'), `paused: ${JSON.stringify(paused.paused)}`);
  await page.click('#resume');
  await page.locator('#pause:not([hidden])').waitFor();
  const resumed = await api(`/v1/applications/shop/services/${web}/release-channels/prod`);
  check(!resumed.paused, 'resumed');

  // Break glass from the instance page: a reason is asked for first; the
  // server's answer is shown (prod has converged: nothing to let through).
  await page.click('#override');
  const noReason = await page.locator('#action-result').textContent();
  check(noReason.includes('needs a reason'), `break glass without a reason: ${noReason}`);
  await page.fill('#override-reason', 'incident 4711');
  const before = problems.length;
  await page.click('#override');
  await page.locator('#action-result.error').waitFor();
  const refused = await page.locator('#action-result').textContent();
  check(refused.includes('already converged on'), `break glass on a converged instance: ${refused}`);
  // The refusal is the one problem the browser logs here: the 400 itself.
  const logged = problems.splice(before);
  check(logged.length <= 1 && logged.every((p) => p.includes('400')), `logged: ${logged.join('\n')}`);
  await page.screenshot({ path: screenshot.replace(/\.png$/, '-instance.png'), fullPage: true });

  check(problems.length === 0, `the page reported problems:\n${problems.join('\n')}`);
  console.log(`status page ok: ${services.length} services × ${CHANNELS.length} channels, prod approved and converged; screenshot ${screenshot}`);
} finally {
  await browser.close();
}
