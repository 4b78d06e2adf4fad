'use strict';
// The browser tier of hystrix-dashboard (scripts/test browser), our own code.
//
// 1. Starts the fixture (examples/browser_fixture.rs, path in FIXTURE_BIN): a real dashboard
//    on 127.0.0.1 whose registry was driven by real commands; it prints its URL and the plan
//    of what it drove (counts by outcome, retries and budget refusals, hedges and cancelled
//    hedged attempts, refusals by the adaptive limit and the limit itself, slow calls and their
//    thresholds, chaos injections and the chaos rates left on, latencies, circuit states,
//    pool, collapser).
// 2. Serves the npm hystrix-dashboard (Netflix's monitor page) on 127.0.0.1 through express,
//    with the page's CDN underscore URL rewritten to the npm file, and opens it in Debian's
//    Chromium (puppeteer-core) on our stream through its /proxy.stream.
// 3. Opens our page (through the fixture's `/`, which redirects to /hystrix/dashboard/).
// 4. Checks both against the plan, exactly (and our stream's extension counters, slow-call
//    and chaos fields, which only our page shows, and the same counters on /metrics); presses our admin buttons and
//    watches both dashboards follow; saves screenshots of both in ARTIFACTS.
// 5. Feeds both dashboards hand-made merged messages in Turbine's forms (reportingHosts 3,
//    objects of counts, deleteData): the Hystrix Dashboard from the harness's express server
//    through its proxy, our page on `?stream=` answered by the tab itself; and checks that our
//    page refuses another origin's stream, visibly.
// 6. The fleet: the fixture's two other instances (same commands, other counts, each on its
//    own dashboard and port) and a Turbine over the three streams (cluster "demo", mounted on
//    the fixture's dashboard): the merged stream's messages against the instances' own; then
//    both dashboards on /turbine.stream?cluster=demo, checked against the three plans exactly
//    (Hosts 3, the cluster rate the instances' sum, per-host rates, error % and latencies,
//    "Open 1 Closed 2" for a circuit open on one host, "Open" on all three, counts summed).
//
// Every wait is a poll with a deadline. Ends with "N passed, M failed" and exit code 1 on any
// failure.

const { spawn } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const readline = require('node:readline');

const express = require('express');
const puppeteer = require('puppeteer-core');

const FIXTURE_BIN = process.env.FIXTURE_BIN;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = process.env.ARTIFACTS || path.resolve(__dirname, '../../../../target/browser-artifacts');
const TOKEN = crypto.randomBytes(16).toString('hex');
const WRONG_TOKEN = 'not-the-admin-token-0000';
const CDN_UNDERSCORE = '//cdnjs.cloudflare.com/ajax/libs/underscore.js/1.8.3/underscore-min.js';
const LOCAL_UNDERSCORE = '/ajax/libs/underscore.js/1.8.3/underscore-min.js';
const WATCHDOG_MS = 150000;

let passed = 0;
const failures = [];

function check(what, got, want) {
  if (JSON.stringify(got) === JSON.stringify(want)) {
    passed += 1;
  } else {
    failures.push(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
  }
}

function log(message) {
  process.stdout.write(`${message}\n`);
}

// Polls `probe` (async, returns a value) until `done(value)`, at most `ms`; returns the last
// value and whether it was done.
async function poll(probe, done, ms, every = 100) {
  const deadline = Date.now() + ms;
  let value = await probe();
  while (!done(value) && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, every));
    value = await probe();
  }
  return { value, done: done(value) };
}

// ----------------------------------------------------------------------------------------------
// The fixture

function startFixture() {
  if (!FIXTURE_BIN || !fs.existsSync(FIXTURE_BIN)) {
    throw new Error(`FIXTURE_BIN must name the built browser_fixture example (got ${FIXTURE_BIN})`);
  }
  const child = spawn(FIXTURE_BIN, [], {
    env: { ...process.env, HYSTRIX_ADMIN_TOKEN: TOKEN },
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const first = new Promise((resolve, reject) => {
    const lines = readline.createInterface({ input: child.stdout });
    lines.once('line', (line) => resolve(JSON.parse(line)));
    child.once('exit', (code) => reject(new Error(`the fixture exited with ${code} before its URL`)));
    setTimeout(() => reject(new Error('no URL from the fixture in 60 s')), 60000).unref();
  });
  return { child, ready: first };
}

// ----------------------------------------------------------------------------------------------
// The real Hystrix Dashboard, served from the npm package

function serveHystrixDashboard() {
  const app = express();
  const packageDir = path.dirname(require.resolve('hystrix-dashboard/package.json'));
  const monitor = fs.readFileSync(path.join(packageDir, 'webapp/monitor/monitor.html'), 'utf8');
  if (!monitor.includes(CDN_UNDERSCORE)) {
    throw new Error(`monitor.html no longer loads ${CDN_UNDERSCORE}: the rewrite needs updating`);
  }
  const rewritten = monitor.split(CDN_UNDERSCORE).join(LOCAL_UNDERSCORE);
  app.get('/monitor/monitor.html', (req, res) => res.type('html').send(rewritten));
  app.get(LOCAL_UNDERSCORE, (req, res) => res.sendFile(require.resolve('underscore/underscore-min.js')));
  app.get('/favicon.ico', (req, res) => res.status(204).end());
  // Hand-made merged messages (app.locals.synthetic, SSE frames), sent every 500 ms.
  app.get(SYNTHETIC_PATH, (req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/event-stream;charset=UTF-8', 'Cache-Control': 'no-cache' });
    const send = () => res.write(app.locals.synthetic || ': none yet\n\n');
    send();
    const timer = setInterval(send, 500);
    req.on('close', () => clearInterval(timer));
  });
  // The package's own static files and its /proxy.stream.
  require('hystrix-dashboard')(app, { proxy: true });
  return new Promise((resolve, reject) => {
    const server = app.listen(0, '127.0.0.1', () => resolve(server));
    server.app = app;
    server.once('error', reject);
  });
}

// ----------------------------------------------------------------------------------------------
// The browser

async function launch() {
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'hystrix-browser-'));
  const browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    userDataDir,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-quic',
      '--no-first-run',
    ],
  });
  return { browser, userDataDir };
}

// A tab that counts stream messages, records console messages and page errors, and refuses
// (and records) any request that leaves 127.0.0.1.
async function openTab(browser, name) {
  const page = await browser.newPage();
  // Short, so that full-page screenshots end where the content does.
  await page.setViewport({ width: 1280, height: 600 });
  // `expectRefused`: the HTTP errors the test provokes on purpose.
  const tab = { page, name, console: [], errors: [], offsite: [], refused: [], expectRefused: [] };
  page.on('console', (message) => tab.console.push(message.text()));
  page.on('response', (response) => {
    if (response.status() >= 400) tab.refused.push(`${response.status()} ${new URL(response.url()).pathname}`);
  });
  page.on('pageerror', (error) => tab.errors.push(String(error)));
  page.on('dialog', (dialog) => (tab.onDialog ? tab.onDialog(dialog) : dialog.dismiss()));
  await page.setRequestInterception(true);
  page.on('request', (request) => {
    const url = request.url();
    const answer = tab.answer && tab.answer(request);
    if (answer) {
      request.respond(answer);
    } else if (url.startsWith('http://127.0.0.1:') || url.startsWith('data:')) {
      request.continue();
    } else {
      tab.offsite.push(url);
      request.abort();
    }
  });
  await page.evaluateOnNewDocument(() => {
    const Native = window.EventSource;
    window.__streamMessages = 0;
    window.EventSource = function CountingEventSource(url, options) {
      const source = new Native(url, options);
      source.addEventListener('message', () => {
        window.__streamMessages += 1;
      });
      return source;
    };
    window.EventSource.prototype = Native.prototype;
    Object.assign(window.EventSource, { CONNECTING: 0, OPEN: 1, CLOSED: 2 });
  });
  return tab;
}

// Waits for every selector, then for two more ticks of the stream (the Hystrix Dashboard loads
// its templates asynchronously: the first messages may come before them).
async function waitForTiles(tab, selectors, perTick) {
  const found = await poll(
    () => tab.page.evaluate((s) => s.filter((sel) => !document.querySelector(sel)), selectors),
    (missing) => missing.length === 0,
    20000,
  );
  check(`${tab.name}: tiles rendered`, found.value, []);
  const seen = await tab.page.evaluate(() => window.__streamMessages);
  const ticks = await poll(
    () => tab.page.evaluate(() => window.__streamMessages),
    (count) => count >= seen + 2 * perTick,
    10000,
  );
  check(`${tab.name}: two more ticks after the tiles`, ticks.done, true);
}

// The console has no "Key Missing" or "Failed" message but Chromium's report of each HTTP
// error the test provoked (`expectRefused`, e.g. the admin route refusing a wrong token).
function checkConsole(tab) {
  const refused = tab.expectRefused;
  check(`${tab.name}: HTTP errors`, tab.refused, refused);
  const loadFailures = tab.console.filter((text) => text.startsWith('Failed to load resource:'));
  check(`${tab.name}: one console report per HTTP error`, loadFailures.length, refused.length);
  const bad = tab.console.filter((text) => (text.includes('Key Missing') || text.includes('Failed'))
    && !text.startsWith('Failed to load resource:'));
  check(`${tab.name}: no "Key Missing" or "Failed" console messages`, bad, []);
  check(`${tab.name}: no page errors`, tab.errors, []);
  check(`${tab.name}: no request left 127.0.0.1`, tab.offsite, []);
}

// ----------------------------------------------------------------------------------------------
// Checks of the Hystrix Dashboard's tiles

function number(text) {
  return text === null ? null : Number(String(text).replace(/,/g, '').trim());
}

async function readHystrixCommand(page, name) {
  return page.evaluate((id) => {
    const tile = document.getElementById(id);
    if (!tile) return null;
    const text = (sel) => {
      const node = tile.querySelector(sel);
      return node ? node.textContent.replace(/\s+/g, ' ').trim() : null;
    };
    return {
      circuit: text('.circuitStatus'),
      // The cell after the "Hosts" header (reportingHosts).
      hosts: (() => {
        const header = Array.from(tile.querySelectorAll('.cell.header')).find((n) => n.textContent.trim() === 'Hosts');
        return header && header.nextElementSibling ? header.nextElementSibling.textContent.trim() : null;
      })(),
      hostRate: text('.ratePerSecondPerHost'),
      success: text('a.success'),
      shortCircuited: text('a.shortCircuited'),
      badRequest: text('a.badRequest'),
      timeout: text('a.timeout'),
      rejected: text('a.rejected'),
      failure: text('a.failure'),
      errorPercentage: text('a.errorPercentage .value'),
      rate: text('.ratePerSecond'),
      mean: text('.latencyMean .value'),
      p50: text('.latencyMedian .value'),
      p90: text('.latency90 .value'),
      p99: text('.latency99 .value'),
      p995: text('.latency995 .value'),
    };
  }, `CIRCUIT_${name}_0`);
}

function checkHystrixCommand(want, got) {
  const what = `Hystrix Dashboard ${want.name}`;
  if (!got) {
    check(`${what}: tile`, null, `CIRCUIT_${want.name}_0`);
    return;
  }
  // Hystrix's isCircuitBreakerOpen is true in OPEN and HALF_OPEN: its page shows both as open.
  check(`${what}: circuit`, got.circuit, want.circuit === 'closed' ? 'Circuit Closed' : 'Circuit Open');
  for (const key of ['success', 'shortCircuited', 'badRequest', 'timeout', 'rejected', 'failure']) {
    check(`${what}: ${key}`, number(got[key]), want[key]);
  }
  check(`${what}: error %`, got.errorPercentage, want.errorPercentage.toFixed(1));
  check(`${what}: rate`, got.rate, want.rate.toFixed(1));
  check(`${what}: hosts and rate per host`, [got.hosts, got.hostRate], ['1', want.rate.toFixed(1)]);
  for (const key of ['mean', 'p50', 'p90', 'p99', 'p995']) {
    check(`${what}: latency ${key}`, number(got[key]), want.latency[key]);
  }
}

async function hystrixCommandOrder(page) {
  return page.evaluate(() => Array.from(document.querySelectorAll('div.monitor[id^="CIRCUIT_"]'))
    .map((node) => node.id.replace(/^CIRCUIT_/, '').replace(/_0$/, '')));
}

// The fill of each command's circle (d3 animates it for 400 ms: poll).
async function hystrixCircleFills(page, names) {
  return page.evaluate((list) => {
    const fills = {};
    for (const name of list) {
      const circle = document.querySelector(`#CIRCUIT_${name}_0 circle`);
      fills[name] = circle ? getComputedStyle(circle).fill : null;
    }
    return fills;
  }, names);
}

async function readHystrixPool(page, name) {
  return page.evaluate((id) => {
    const tile = document.getElementById(id);
    if (!tile) return null;
    const cells = {};
    tile.querySelectorAll('.tableRow').forEach((row) => {
      const parts = Array.from(row.querySelectorAll('.cell'));
      for (let i = 0; i + 1 < parts.length; i += 2) {
        cells[parts[i].textContent.trim()] = parts[i + 1].textContent.trim();
      }
    });
    const rate = tile.querySelector('.ratePerSecond');
    cells.rate = rate ? rate.textContent.trim() : null;
    return cells;
  }, `THREAD_POOL_${name}_0`);
}

function checkHystrixPool(want, got) {
  const what = `Hystrix Dashboard pool ${want.name}`;
  if (!got) {
    check(`${what}: tile`, null, `THREAD_POOL_${want.name}_0`);
    return;
  }
  check(`${what}: Active`, number(got.Active), want.active);
  check(`${what}: Max Active`, number(got['Max Active']), want.maxActive);
  check(`${what}: Queued`, number(got.Queued), want.queued);
  check(`${what}: Executions`, number(got.Executions), want.executions);
  check(`${what}: Pool Size`, number(got['Pool Size']), want.poolSize);
  check(`${what}: Queue Size`, number(got['Queue Size']), want.queueSize);
  check(`${what}: rate`, got.rate, want.rate.toFixed(1));
}

// ----------------------------------------------------------------------------------------------
// Checks of our page's tiles: the text shown and the data-* attributes

function tileId(kind, name) {
  return `tile-${kind}-${name.replace(/\s/g, '_')}`;
}

async function readOurTile(page, kind, name) {
  return page.evaluate((id) => {
    const tile = document.getElementById(id);
    if (!tile) return null;
    const shown = {};
    tile.querySelectorAll('[data-field]').forEach((node) => {
      shown[node.dataset.field] = node.textContent.trim();
    });
    const dot = tile.querySelector('.dot');
    const style = getComputedStyle(tile);
    const shortRate = tile.querySelector('.short-circuit-rate');
    const line = (selector) => {
      const node = tile.querySelector(selector);
      if (!node) return null;
      const inner = tile.getBoundingClientRect();
      const box = node.getBoundingClientRect();
      return {
        text: node.textContent.replace(/\s+/g, ' ').trim(),
        shown: node.offsetParent !== null,
        dimmed: node.classList.contains('zero'),
        // Shown whole: neither wider than its box (nowrap) nor past the tile's padding edge.
        fits: node.offsetParent === null || (node.scrollWidth <= node.clientWidth
          && box.right <= inner.right - parseFloat(style.borderRightWidth)),
      };
    };
    return {
      data: { ...tile.dataset },
      shown,
      dot: dot ? getComputedStyle(dot).backgroundColor : null,
      classes: Array.from(tile.classList).filter((c) => c.startsWith('circuit-')),
      border: [style.borderTopColor, style.borderLeftColor],
      background: style.backgroundColor,
      shortRateShown: shortRate ? !shortRate.hidden && shortRate.offsetParent !== null : null,
      chaosOn: tile.classList.contains('chaos-on'),
      chaosColour: (() => {
        const chaos = tile.querySelector('.chaos');
        return chaos ? getComputedStyle(chaos).borderTopColor : null;
      })(),
      hostsLine: line('.hosts'),
      retries: line('.retries'),
      hedges: line('.hedges'),
      limit: line('.limit'),
      slowCalls: line('.slow-calls'),
      chaos: line('.chaos'),
      limitRows: Array.from(tile.querySelectorAll('.limit > div'))
        .map((row) => row.textContent.replace(/\s+/g, ' ').trim()),
      limitSparkPoints: (() => {
        const polyline = tile.querySelector('.limit-spark polyline');
        const points = polyline ? (polyline.getAttribute('points') || '').trim() : null;
        return points === null ? null : points.split(/\s+/).filter((p) => p !== '').length;
      })(),
    };
  }, tileId(kind, name));
}

function commas(n) {
  return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

// A line of two rates per second (rolling count / window) on every command tile, `line` of
// `got`, for the plan's counts `keys` (their rates are `<key>Rate`): the text `text(rates)`,
// dimmed while both counts are 0, the rates shown and in data-*, the counts in data-*.
function checkRatesLine(what, want, got, line, keys, text) {
  const rates = keys.map((key) => want[`${key}Rate`].toFixed(1));
  check(`${what}: ${line} line`, got[line], {
    text: text(...rates),
    shown: true,
    dimmed: keys.every((key) => want[key] === 0),
    fits: true,
  });
  keys.forEach((key, i) => {
    check(`${what}: ${key} per second`, [got.data[`${key}Rate`], got.shown[`${key}Rate`]], [rates[i], rates[i]]);
  });
  check(`${what}: ${line} counts`, keys.map((key) => got.data[key]), keys.map((key) => String(want[key])));
}

// The adaptive limit's line: for a command with one, the limit, in flight and queued (data-*
// and shown), the refusals per second, and the sparkline of the limit (every point the plan's
// limit: it has not moved while the fixture serves); hidden for a command without one that
// refused nothing.
function checkLimitLine(what, want, got) {
  const rejectedRate = want.limitRejectedRate.toFixed(1);
  check(`${what}: limit refusals`, [got.data.limitRejected, got.data.limitRejectedRate, got.shown.limitRejectedRate],
    [String(want.limitRejected), rejectedRate, rejectedRate]);
  const a = want.adaptive;
  if (!a) {
    check(`${what}: no limit line`, [got.limit.shown, got.data.adaptiveLimit ?? null, got.data.adaptiveLimitHistory],
      [want.limitRejected > 0, null, '']);
    return;
  }
  check(`${what}: limit line`, [got.limitRows, got.limit.shown, got.limit.dimmed], [
    [`Limit ${a.limit}`, `in flight ${a.inFlight} \u00b7 queued ${a.queued} \u00b7 rejected ${rejectedRate}/s`],
    true,
    want.limitRejected === 0,
  ]);
  const values = [a.limit, a.inFlight, a.queued].map(String);
  check(`${what}: limit, in flight, queued`,
    [got.data.adaptiveLimit, got.data.adaptiveLimitInFlight, got.data.adaptiveLimitQueued], values);
  check(`${what}: limit, in flight, queued shown`,
    [got.shown.adaptiveLimit, got.shown.adaptiveLimitInFlight, got.shown.adaptiveLimitQueued], values);
  const history = (got.data.adaptiveLimitHistory || '').split(',');
  check(`${what}: the limit over time`,
    [history.length >= 2, history.every((v) => v === String(a.limit)), got.limitSparkPoints === history.length],
    [true, true, true]);
}

// The slow-call line: for a command with slow calls on, the slow calls' percentage, the two
// thresholds and the slow calls per second (shown and in data-*), dimmed while none was slow;
// hidden for a command with slow calls off (none slow).
function checkSlowCallLine(what, want, got) {
  const rate = want.slowCallRate.toFixed(1);
  check(`${what}: slow calls`, [got.data.slowCalls, got.data.slowCallRate, got.shown.slowCallRate],
    [String(want.slowCall), rate, rate]);
  const keys = ['slowCallPercentage', 'slowCallRateThreshold', 'slowCallDurationThreshold'];
  const s = want.slowCalls;
  if (!s) {
    check(`${what}: no slow-call line`, [got.slowCalls.shown, keys.map((key) => got.data[key] ?? null)],
      [want.slowCall > 0, [null, null, null]]);
    return;
  }
  check(`${what}: slow-call line`, got.slowCalls, {
    text: `Slow ${s.percentage} % (trips at ${s.rateThresholdPercentage} %, over ${s.durationThresholdMs} ms) \u00b7 ${rate}/s`,
    shown: true,
    dimmed: want.slowCall === 0,
    fits: true,
  });
  const values = [s.percentage, s.rateThresholdPercentage, s.durationThresholdMs].map(String);
  check(`${what}: slow-call percentage and thresholds`, keys.map((key) => got.data[key]), values);
  check(`${what}: slow-call percentage and thresholds shown`, keys.map((key) => got.shown[key]), values);
}

// The chaos line: for a command whose chaos is on, in the warning colour, each rate above 0
// and the injections per second, exactly (shown and in data-*); hidden while chaos is off.
function checkChaosLine(what, want, got) {
  const rate = want.chaosInjectedRate.toFixed(1);
  check(`${what}: chaos injections`, [got.data.chaosInjected, got.data.chaosInjectedRate],
    [String(want.chaosInjected), rate]);
  const keys = ['chaosFaultRate', 'chaosLatencyRate', 'chaosLatencyMs', 'chaosHangRate'];
  const c = want.chaos;
  if (!c) {
    check(`${what}: no chaos line`, [got.chaos.shown, got.chaosOn, keys.map((key) => got.data[key] ?? null)],
      [false, false, [null, null, null, null]]);
    return;
  }
  const parts = [];
  if (c.faultRatePercentage > 0) parts.push(`fault ${c.faultRatePercentage} %`);
  if (c.latencyRatePercentage > 0) parts.push(`latency ${c.latencyRatePercentage} % \u00d7 ${c.latencyMs} ms`);
  if (c.hangRatePercentage > 0) parts.push(`hang ${c.hangRatePercentage} %`);
  parts.push(`${rate}/s injected`);
  const text = `Chaos on: ${parts.join(' \u00b7 ')}`;
  check(`${what}: chaos line`, [got.chaos, got.chaosOn, got.chaosColour], [{
    text,
    shown: true,
    dimmed: false,
    fits: true,
  }, true, 'rgb(255, 153, 0)']);
  check(`${what}: chaos rates`, keys.map((key) => got.data[key]),
    [c.faultRatePercentage, c.latencyRatePercentage, c.latencyMs, c.hangRatePercentage].map(String));
}

function checkOurCommand(want, got) {
  const what = `our page ${want.name}`;
  if (!got) {
    check(`${what}: tile`, null, tileId('command', want.name));
    return;
  }
  const circuits = { closed: ['closed', 'Closed'], open: ['open', 'Open'], 'half-open': ['half-open', 'Half Open'] };
  check(`${what}: circuit`, [got.data.circuit, got.shown.circuit], circuits[want.circuit]);
  check(`${what}: circuit class`, got.classes, want.circuit === 'closed' ? [] : [`circuit-${want.circuit}`]);
  // Short-circuited calls per second (rolling count / window), beside the error percentage:
  // shown while the circuit is not closed or the window has short-circuited calls.
  const shortRate = want.shortCircuitRate.toFixed(1);
  check(`${what}: short-circuited per second`, [got.data.shortCircuitRate, got.shown.shortCircuitRate, got.shortRateShown],
    [shortRate, shortRate, want.circuit !== 'closed' || want.shortCircuited > 0]);
  check(`${what}: rate`, [got.data.rate, got.shown.rate], [want.rate.toFixed(1), want.rate.toFixed(1)]);
  const rate = want.rate.toFixed(1);
  check(`${what}: hosts line (one host)`, [got.hostsLine, got.data.hosts, got.data.hostRate, got.data.clusterRate],
    [{ text: `Hosts: 1 \u00b7 Host: ${rate}/s \u00b7 Cluster: ${rate}/s`, shown: true, dimmed: false, fits: true }, '1', rate, rate]);
  // Retries and retries the budget refused; hedges and hedged attempts cancelled.
  checkRatesLine(what, want, got, 'retries', ['retry', 'retryBudgetExhausted'],
    (retries, refused) => `Retries ${retries}/s \u00b7 budget refused ${refused}/s`);
  checkRatesLine(what, want, got, 'hedges', ['hedge', 'hedgeCancelled'],
    (hedges, cancelled) => `Hedges ${hedges}/s \u00b7 cancelled ${cancelled}/s`);
  checkLimitLine(what, want, got);
  checkSlowCallLine(what, want, got);
  checkChaosLine(what, want, got);
  check(`${what}: error %`, [got.data.errorPercentage, got.shown.errorPercentage],
    [String(want.errorPercentage), String(want.errorPercentage)]);
  check(`${what}: requests`, got.data.requests, String(want.requests));
  check(`${what}: group`, got.data.group, want.group);
  check(`${what}: isolation`, got.data.isolation, want.isolation);
  for (const key of ['success', 'shortCircuited', 'badRequest', 'timeout', 'rejected', 'failure']) {
    check(`${what}: ${key}`, [got.data[key], got.shown[key]], [String(want[key]), commas(want[key])]);
  }
  for (const key of ['mean', 'p50', 'p90', 'p99', 'p995']) {
    const value = String(want.latency[key]);
    check(`${what}: latency ${key}`, [got.data[key], got.shown[key]], [value, value]);
  }
}

function checkOurPool(want, got) {
  const what = `our page pool ${want.name}`;
  if (!got) {
    check(`${what}: tile`, null, tileId('pool', want.name));
    return;
  }
  check(`${what}: rate`, [got.data.rate, got.shown.rate], [want.rate.toFixed(1), want.rate.toFixed(1)]);
  check(`${what}: hosts and rate per host`, [got.data.hosts, got.data.hostRate], ['1', want.rate.toFixed(1)]);
  for (const key of ['active', 'maxActive', 'queued', 'executions', 'poolSize', 'rejections', 'queueSize']) {
    check(`${what}: ${key}`, [got.data[key], got.shown[key]], [String(want[key]), commas(want[key])]);
  }
}

function checkOurCollapser(want, got) {
  const what = `our page collapser ${want.name}`;
  if (!got) {
    check(`${what}: tile`, null, tileId('collapser', want.name));
    return;
  }
  check(`${what}: batches`, [got.data.batches, got.shown.batches], [String(want.batches), String(want.batches)]);
  check(`${what}: requests batched`, [got.data.requestsBatched, got.shown.requestsBatched],
    [String(want.requestsBatched), String(want.requestsBatched)]);
  for (const key of ['mean', 'p50', 'p90', 'p99', 'p995']) {
    const value = String(want.latency[key]);
    check(`${what}: batch size ${key}`, [got.data[key], got.shown[key]], [value, value]);
  }
}

async function commandOrder(page) {
  return page.evaluate(() => Array.from(document.querySelectorAll('#command-tiles .tile')).map((t) => t.dataset.name));
}

// ----------------------------------------------------------------------------------------------
// Our stream's extension counters, read from the wire

// The first message of each `type name` in `keys` on the SSE stream at `streamUrl` that
// `accept` takes, by key, within 10 s.
async function streamMessages(streamUrl, keys, accept = () => true) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), 10000);
  const found = {};
  try {
    const response = await fetch(streamUrl, { signal: controller.signal });
    const decoder = new TextDecoder();
    let buffered = '';
    for await (const chunk of response.body) {
      buffered += decoder.decode(chunk, { stream: true });
      let end;
      while ((end = buffered.indexOf('\n\n')) >= 0) {
        const frame = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        if (!frame.startsWith('data: ')) continue;
        const message = JSON.parse(frame.slice('data: '.length));
        const key = `${message.type} ${message.name}`;
        if (keys.includes(key) && !found[key] && accept(message)) found[key] = message;
      }
      if (keys.every((key) => found[key])) break;
    }
  } catch (error) {
    if (error.name !== 'AbortError') throw error;
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
  return found;
}

// The first HystrixCommand message of each command in `names` on `url`'s /hystrix.stream.
async function streamCommands(url, names) {
  const found = await streamMessages(`${url}/hystrix.stream`, names.map((name) => `HystrixCommand ${name}`));
  const byName = {};
  for (const name of names) {
    if (found[`HystrixCommand ${name}`]) byName[name] = found[`HystrixCommand ${name}`];
  }
  return byName;
}

// The adaptive limit's numbers of the plan, [limit, in flight, queued], or null without one.
function adaptiveOf(want) {
  return want.adaptive ? [want.adaptive.limit, want.adaptive.inFlight, want.adaptive.queued] : null;
}

// The stream carries the retry, hedge and limit counters the plan says, and the adaptive limit
// (absent keys without one) (the Hystrix Dashboard ignores them).
async function checkStreamAttempts(url, plan) {
  const messages = await streamCommands(url, plan.commands.map((c) => c.name));
  for (const want of plan.commands) {
    const message = messages[want.name];
    check(`stream ${want.name}: retry, hedge and limit counters`,
      message ? [message.rollingCountRetry, message.rollingCountRetryBudgetExhausted,
        message.rollingCountHedge, message.rollingCountHedgeCancelled, message.rollingCountLimitRejected] : null,
      [want.retry, want.retryBudgetExhausted, want.hedge, want.hedgeCancelled, want.limitRejected]);
    const keys = ['adaptiveLimit', 'adaptiveLimitInFlight', 'adaptiveLimitQueued'];
    check(`stream ${want.name}: adaptive limit`,
      message && keys.some((key) => key in message) ? keys.map((key) => message[key]) : null,
      adaptiveOf(want));
    check(`stream ${want.name}: rollingCountSlowCall`, message ? message.rollingCountSlowCall : null, want.slowCall);
    const slowKeys = ['slowCallCount', 'slowCallPercentage',
      'propertyValue_circuitBreakerSlowCallDurationThresholdInMilliseconds',
      'propertyValue_circuitBreakerSlowCallRateThresholdPercentage'];
    const s = want.slowCalls;
    check(`stream ${want.name}: slow-call health and thresholds`,
      message && slowKeys.some((key) => key in message) ? slowKeys.map((key) => message[key]) : null,
      s ? [want.slowCall, s.percentage, s.durationThresholdMs, s.rateThresholdPercentage] : null);
    check(`stream ${want.name}: rollingCountChaosInjected`, message ? message.rollingCountChaosInjected : null,
      want.chaosInjected);
    const chaosKeys = ['propertyValue_chaosEnabled', 'propertyValue_chaosFaultRatePercentage',
      'propertyValue_chaosLatencyRatePercentage', 'propertyValue_chaosLatencyInMilliseconds',
      'propertyValue_chaosHangRatePercentage'];
    const c = want.chaos;
    check(`stream ${want.name}: chaos properties`,
      message && chaosKeys.some((key) => key in message) ? chaosKeys.map((key) => message[key]) : null,
      c ? [true, c.faultRatePercentage, c.latencyRatePercentage, c.latencyMs, c.hangRatePercentage] : null);
  }
}

// /metrics has the same retry, hedge and limit counts, as events of
// hystrix_command_events_total: counters since the start, equal to the rolling counts while
// nothing has left the window; and the adaptive limit's gauges, only for a command with one.
async function checkMetricsAttempts(url, plan) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const sample = /^hystrix_command_events_total\{command="([^"]*)",group="[^"]*",event="([a-z_]+)"\} (\S+)$/;
  const gauge = /^(hystrix_command_adaptive_limit(?:_in_flight|_queue_size)?|hystrix_command_chaos_enabled)\{command="([^"]*)",group="[^"]*"\} (\S+)$/;
  const counts = {};
  const gauges = {};
  for (const line of text.split('\n')) {
    const found = sample.exec(line);
    if (found) counts[`${found[1]} ${found[2]}`] = Number(found[3]);
    const value = gauge.exec(line);
    if (value) gauges[`${value[2]} ${value[1]}`] = Number(value[3]);
  }
  const events = ['retry', 'retry_budget_exhausted', 'hedge', 'hedge_cancelled', 'limit_rejected'];
  const names = ['hystrix_command_adaptive_limit', 'hystrix_command_adaptive_limit_in_flight',
    'hystrix_command_adaptive_limit_queue_size'];
  for (const want of plan.commands) {
    check(`/metrics ${want.name}: retry, hedge and limit events`,
      events.map((event) => counts[`${want.name} ${event}`] ?? null),
      [want.retry, want.retryBudgetExhausted, want.hedge, want.hedgeCancelled, want.limitRejected]);
    const values = names.map((name) => gauges[`${want.name} ${name}`] ?? null);
    check(`/metrics ${want.name}: adaptive limit gauges`,
      values.every((v) => v === null) ? null : values, adaptiveOf(want));
    check(`/metrics ${want.name}: chaos_injected events and the chaos gauge`,
      [counts[`${want.name} chaos_injected`] ?? null, gauges[`${want.name} hystrix_command_chaos_enabled`] ?? null],
      [want.chaosInjected, want.chaos ? 1 : null]);
  }
}

// ----------------------------------------------------------------------------------------------
// Merged messages, hand-made: Turbine's forms (reportingHosts 3, sums, objects of counts,
// deleteData) read by both dashboards

const SYNTHETIC_PATH = '/synthetic-fleet.stream';

// Merged messages for three hosts, made from real messages of the fixture's stream (so every
// key the Hystrix Dashboard requires is there), with the numbers and forms set here.
function syntheticFleet(base) {
  const command = base['HystrixCommand GetUser'];
  const latency = (mean, p50, p90, p99, p995) => ({
    latencyExecute_mean: mean,
    latencyExecute: { ...command.latencyExecute, 50: p50, 90: p90, 99: p99, 99.5: p995 },
  });
  const fleet = (name, fields) => ({
    ...command,
    name,
    reportingHosts: 3,
    requestCount: 300,
    errorCount: 30,
    errorPercentage: 10,
    rollingCountSuccess: 270,
    rollingCountFailure: 30,
    rollingCountShortCircuited: 0,
    propertyValue_metricsRollingStatisticalWindowInMilliseconds: 10000,
    ...latency(20, 10, 31, 62, 91),
    ...fields,
  });
  const commands = [
    // Open on one host of three; the hosts disagree on the group.
    fleet('FleetMixed', {
      isCircuitBreakerOpen: { true: 1, false: 2 },
      circuitBreakerStatus: { CLOSED: 2, OPEN: 1 },
      group: { Accounts: 1, Users: 2 },
    }),
    // Open on all three.
    fleet('FleetOpen', { isCircuitBreakerOpen: 3, circuitBreakerStatus: 'OPEN' }),
    // Forced open on one host of three.
    fleet('FleetForced', { propertyValue_circuitBreakerForceOpen: { false: 2, true: 1 } }),
    // The hosts disagree on the isolation and on chaos; slow calls and throttling on, summed.
    fleet('FleetOdd', {
      propertyValue_executionIsolationStrategy: { SEMAPHORE: 1, THREAD: 2 },
      propertyValue_chaosEnabled: { false: 2, true: 1 },
      propertyValue_chaosFaultRatePercentage: { 0: 2, 10: 1 },
      propertyValue_chaosLatencyRatePercentage: 0,
      propertyValue_chaosLatencyInMilliseconds: 100,
      propertyValue_chaosHangRatePercentage: 0,
      rollingCountChaosInjected: 0,
      slowCallCount: 30,
      slowCallPercentage: 30,
      rollingCountSlowCall: 30,
      propertyValue_circuitBreakerSlowCallDurationThresholdInMilliseconds: 40,
      propertyValue_circuitBreakerSlowCallRateThresholdPercentage: 50,
      throttleProbability: 0.9,
      rollingCountThrottled: 0,
    }),
    // Reported, then no host reports it any more.
    fleet('FleetGone', {}),
  ];
  const pool = {
    ...base['HystrixThreadPool InventoryPool'],
    name: 'FleetPool',
    reportingHosts: 3,
    currentActiveCount: 3,
    currentQueueSize: 6,
    currentPoolSize: 6,
    rollingMaxActiveThreads: 6,
    rollingCountThreadsExecuted: 45,
    rollingCountCommandRejections: 0,
    propertyValue_queueSizeRejectionThreshold: 15,
    propertyValue_metricsRollingStatisticalWindowInMilliseconds: 30000,
  };
  const collapser = {
    ...base['HystrixCollapser GetRating'],
    name: 'FleetCollapser',
    reportingHosts: 3,
    rollingCountBatches: 9,
    rollingCountRequestsBatched: 30,
    batchSize_mean: 9,
    batchSize: { ...base['HystrixCollapser GetRating'].batchSize, 50: 9, 90: 15, 99: 15, 99.5: 15 },
  };
  const gone = { type: 'HystrixCommand', name: 'FleetGone', deleteData: 'true' };
  return [...commands, pool, collapser, gone];
}

function sseBody(messages) {
  return messages.map((m) => `data: ${JSON.stringify(m)}\n\n`).join('');
}

// The real Hystrix Dashboard's reading of the hand-made messages (through its proxy, from the
// harness's express server) and ours (the page on `?stream=`, answered by the tab itself on the
// fixture's origin), each as Hystrix's templates and hystrixCommand.js compute it; then the
// refusal of another origin's stream.
async function checkSyntheticFleet(browser, server, url, tabs) {
  log('merged forms, hand-made: both dashboards');
  const base = await streamMessages(`${url}/hystrix.stream`,
    ['HystrixCommand GetUser', 'HystrixThreadPool InventoryPool', 'HystrixCollapser GetRating']);
  const messages = syntheticFleet(base);
  // Our tab answers each connection with one tick and a retry of 200 ms: a tick every reconnection.
  const body = `retry: 200\n\n${sseBody(messages)}`;
  server.app.locals.synthetic = sseBody(messages);
  const perTick = messages.length;

  // (a) The Hystrix Dashboard.
  const theirs = await openTab(browser, 'Hystrix Dashboard (hand-made merged messages)');
  tabs.push(theirs);
  const origin = encodeURIComponent(`http://127.0.0.1:${server.address().port}${SYNTHETIC_PATH}`);
  await theirs.page.goto(`http://127.0.0.1:${server.address().port}/monitor/monitor.html?stream=${origin}&title=fleet`);
  await waitForTiles(theirs, ['#CIRCUIT_FleetMixed_0', '#CIRCUIT_FleetOdd_0', '#THREAD_POOL_FleetPool_0'], perTick);
  const their = {};
  for (const name of ['FleetMixed', 'FleetOpen', 'FleetForced', 'FleetOdd', 'FleetGone']) {
    their[name] = await readHystrixCommand(theirs.page, name);
  }
  const perHostView = (t) => t && [t.hosts, t.hostRate, t.rate, t.errorPercentage, t.mean, t.p50, t.p90, t.p99, t.p995];
  const wantView = ['3', '10.0', '30.0', '3.3', '6', '3', '10', '20', '30'];
  check('Hystrix Dashboard FleetMixed: hosts, host and cluster rate, error %, latencies per host',
    perHostView(their.FleetMixed), wantView);
  check('Hystrix Dashboard: circuits open on 1 of 3, on 3 of 3, forced open on 1 of 3',
    ['FleetMixed', 'FleetOpen', 'FleetForced'].map((n) => their[n] && their[n].circuit),
    // Its template tests the forced-open property for truth: an object of counts is true.
    ['Circuit Open 1 Closed 2', 'Circuit Open', 'Circuit Forced Open']);
  check('Hystrix Dashboard FleetOdd: no rejected counter for a mixed isolation',
    their.FleetOdd && their.FleetOdd.rejected, null);
  // hystrixCommand.js hands deleteCircuit data.escapedName, which only preProcessData sets,
  // so a deleteData message removes no tile (#CIRCUIT_undefined).
  check('Hystrix Dashboard: keeps FleetGone after its deleteData (its escapedName bug)', their.FleetGone !== null, true);
  const theirPool = await readHystrixPool(theirs.page, 'FleetPool');
  check('Hystrix Dashboard FleetPool: queue size and window per host, counts summed',
    theirPool && [theirPool.Active, theirPool.Queued, theirPool['Pool Size'], theirPool['Queue Size'], theirPool.rate],
    ['3', '6', '6', '5', '4.5']);
  await theirs.page.screenshot({ path: path.join(ARTIFACTS, 'hystrix-dashboard-merged-forms.png'), fullPage: true });

  // (b) Our page on `?stream=`, the stream answered by the tab (same origin as the page).
  const ours = await openTab(browser, 'our page (hand-made merged messages)');
  tabs.push(ours);
  ours.answer = (request) => (request.url() === `${url}${SYNTHETIC_PATH}`
    ? { status: 200, contentType: 'text/event-stream', headers: { 'Cache-Control': 'no-cache' }, body } : null);
  await ours.page.goto(`${url}/hystrix/dashboard/?stream=${encodeURIComponent(SYNTHETIC_PATH)}`);
  await waitForTiles(ours, ['#tile-command-FleetMixed', '#tile-command-FleetOdd', '#tile-pool-FleetPool',
    '#tile-collapser-FleetCollapser'], perTick);
  const tile = (kind, name) => readOurTile(ours.page, kind, name);
  const mixed = await tile('command', 'FleetMixed');
  const oursView = (t) => t && [t.data.hosts, t.data.hostRate, t.data.rate, t.data.errorPercentage,
    t.data.mean, t.data.p50, t.data.p90, t.data.p99, t.data.p995];
  check('our page FleetMixed: hosts, host and cluster rate, error %, latencies per host', oursView(mixed), wantView);
  check('our page FleetMixed: hosts line shown', mixed && mixed.hostsLine,
    { text: 'Hosts: 3 \u00b7 Host: 10.0/s \u00b7 Cluster: 30.0/s', shown: true, dimmed: false, fits: true });
  check('our page FleetMixed: mixed group', mixed && mixed.data.group, 'mixed (Accounts: 1, Users: 2)');
  const circuits = [];
  for (const name of ['FleetMixed', 'FleetOpen', 'FleetForced']) {
    const t = await tile('command', name);
    circuits.push(t && [t.data.circuit, t.shown.circuit, t.classes]);
  }
  check('our page: circuits open on 1 of 3, on 3 of 3, forced open on 1 of 3', circuits, [
    ['partly-open', 'Open 1 Closed 2', ['circuit-partly-open']],
    ['open', 'Open', ['circuit-open']],
    ['forced-open', 'Forced Open 1 of 3', ['circuit-open']],
  ]);
  const odd = await tile('command', 'FleetOdd');
  check('our page FleetOdd: mixed isolation', odd && odd.data.isolation, 'mixed (SEMAPHORE: 1, THREAD: 2)');
  check('our page FleetOdd: chaos on 1 of 3 hosts, the mixed fault rate, properties not divided',
    odd && [odd.chaos.text, odd.data.chaosFaultRate, odd.data.chaosLatencyMs],
    ['Chaos on: on 1 of 3 hosts \u00b7 fault mixed (0: 2, 10: 1) % \u00b7 0.0/s injected', 'mixed (0: 2, 10: 1)', '100']);
  check('our page FleetOdd: slow-call percentage per host, thresholds not divided',
    odd && [odd.data.slowCallPercentage, odd.data.slowCallRateThreshold, odd.data.slowCallDurationThreshold, odd.data.slowCallRate],
    ['10', '50', '40', '3.0']);
  check('our page FleetOdd: throttling probability per host', odd && odd.data.throttleProbability, '0.30');
  check('our page: FleetGone removed by its deleteData', await tile('command', 'FleetGone'), null);
  check('our page: command count without FleetGone',
    await ours.page.$eval('#command-count', (n) => n.textContent), '4');
  const pool = await tile('pool', 'FleetPool');
  check('our page FleetPool: queue size and window per host, counts summed',
    pool && [pool.data.hosts, pool.data.active, pool.data.queued, pool.data.poolSize, pool.data.queueSize, pool.data.rate, pool.data.hostRate],
    ['3', '3', '6', '6', '5', '4.5', '1.5']);
  const collapser = await tile('collapser', 'FleetCollapser');
  check('our page FleetCollapser: batch sizes per host, counts summed',
    collapser && [collapser.data.hosts, collapser.data.batches, collapser.data.mean, collapser.data.p50, collapser.data.p90],
    ['3', '9', '3', '3', '5']);
  // Never a JS object's or a failed number's text, shown or in data-*.
  const bad = await ours.page.evaluate(() => {
    const texts = [document.body.innerText];
    document.querySelectorAll('.tile').forEach((t) => texts.push(...Object.values(t.dataset)));
    return texts.filter((t) => /\[object Object\]|NaN|undefined/.test(t));
  });
  check('our page: no "[object Object]", NaN or undefined on merged messages', bad, []);
  check('our page: breaker buttons off on another stream',
    await ours.page.evaluate(() => [document.body.dataset.admin, document.getElementById('admin-mode').textContent,
      document.getElementById('stream-name').textContent]),
    ['off', 'breaker buttons off (another stream)', SYNTHETIC_PATH]);
  await ours.page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-merged-forms.png'), fullPage: true });

  // (c) Another origin's stream is refused, visibly, and never requested.
  const refused = await openTab(browser, 'our page (another origin refused)');
  tabs.push(refused);
  for (const other of ['http://localhost:9/hystrix.stream', '//example.invalid/turbine.stream']) {
    await refused.page.goto(`${url}/hystrix/dashboard/?stream=${encodeURIComponent(other)}`);
    const shown = await poll(
      () => refused.page.evaluate(() => {
        const alert = document.getElementById('stream-refused');
        return [!alert.hidden && alert.offsetParent !== null, alert.textContent.startsWith('Refused stream '),
          document.getElementById('connection').dataset.state];
      }),
      (v) => v[0],
      5000,
    );
    check(`our page: ${other} refused with a visible message`, shown.value, [true, true, 'refused']);
  }
  await refused.page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-stream-refused.png') });
  for (const tab of [theirs, ours, refused]) await tab.page.close();
}

// ----------------------------------------------------------------------------------------------
// The fleet: a Turbine (mounted on the fixture's dashboard) over the three instances' streams

const TURBINE_PATH = '/turbine.stream?cluster=demo';

// The Hystrix Dashboard's roundNumber: one decimal, '.0' when whole.
function roundNumber(n) {
  const text = String(Math.round(n * 10) / 10);
  return text.includes('.') ? text : `${text}.0`;
}

// What the merged tile of command `name` must show, from the three instances' plans: counts
// summed; the rate the cluster's (requests / window) and per host; error percentage per host
// (summed / hosts, one decimal); latencies per host (floor of summed / hosts); open on how many
// hosts (HALF_OPEN is open: Hystrix's isCircuitBreakerOpen is true then).
function fleetCommand(instances, name) {
  const plans = instances.map((i) => i.plan.commands.find((c) => c.name === name));
  const hosts = plans.length;
  const sum = (f) => plans.reduce((total, p) => total + f(p), 0);
  const requests = sum((p) => p.requests);
  const counters = {};
  for (const key of ['success', 'shortCircuited', 'badRequest', 'timeout', 'rejected', 'failure']) {
    counters[key] = sum((p) => p[key]);
  }
  const latency = {};
  for (const key of ['mean', 'p50', 'p90', 'p99', 'p995']) latency[key] = Math.floor(sum((p) => p.latency[key]) / hosts);
  return {
    name,
    hosts,
    requests,
    rate: requests / 10,
    hostRate: requests / 10 / hosts,
    errorPercentage: sum((p) => p.errorPercentage) / hosts,
    counters,
    latency,
    open: plans.filter((p) => p.circuit !== 'closed').length,
  };
}

async function fleetHosts(read, names) {
  const hosts = {};
  for (const name of names) {
    const tile = await read(name);
    hosts[name] = tile ? tile.hosts : null;
  }
  return hosts;
}

async function checkFleet(browser, server, url, instances, tabs) {
  log(`fleet: instances at ${instances.map((i) => i.url).join(', ')}; ${url}${TURBINE_PATH}`);
  const names = instances[0].plan.commands.map((c) => c.name);
  check('the fixture drove three instances of the same commands', instances.map((i) => i.plan.commands.map((c) => c.name)),
    [names, names, names]);
  const want = names.map((name) => fleetCommand(instances, name));
  check('the fleet has a command open on one host of three and one open on all',
    want.filter((w) => w.open > 0).map((w) => [w.name, w.open]), [['SendEmail', 3], ['GetStock', 1], ['GetReviews', 1]]);

  // The wire: each merged message sums the instances' own messages of the same tick (their
  // counts stay put); the first merged ticks may come before the Turbine has read all three
  // instances (it reads them while its stream has a client), so the first with 3 hosts.
  const keys = names.map((name) => `HystrixCommand ${name}`);
  const [merged, ...own] = await Promise.all([
    streamMessages(`${url}${TURBINE_PATH}`, keys, (m) => m.reportingHosts === 3),
    ...instances.map((i) => streamMessages(`${i.url}/hystrix.stream`, keys)),
  ]);
  for (const w of want) {
    const key = `HystrixCommand ${w.name}`;
    const m = merged[key];
    check(`turbine.stream ${w.name}: hosts and requests, the instances' sum`,
      m ? [m.reportingHosts, m.requestCount] : null,
      [3, own.reduce((total, o) => total + (o[key] ? o[key].requestCount : NaN), 0)]);
    check(`turbine.stream ${w.name}: requests as the plans`, m ? m.requestCount : null, w.requests);
  }

  const perTick = names.length + instances[0].plan.pools.length + instances[0].plan.collapsers.length;
  const pool = instances[0].plan.pools[0].name;
  const poolPlans = instances.map((i) => i.plan.pools.find((p) => p.name === pool));
  const poolSum = (key) => poolPlans.reduce((total, p) => total + p[key], 0);
  const poolRate = poolSum('executions') / 10;

  // (a) The real Hystrix Dashboard on the merged stream, through its proxy.
  log('fleet: the Hystrix Dashboard');
  const theirs = await openTab(browser, 'Hystrix Dashboard (fleet)');
  tabs.push(theirs);
  const stream = encodeURIComponent(`${url}${TURBINE_PATH}`);
  await theirs.page.goto(`http://127.0.0.1:${server.address().port}/monitor/monitor.html?stream=${stream}&title=demo`);
  await waitForTiles(theirs, [...names.map((n) => `#CIRCUIT_${n}_0`), `#THREAD_POOL_${pool}_0`], perTick);
  // Until every instance reports (the first merged ticks may come before all three connect).
  const readTheirs = (name) => readHystrixCommand(theirs.page, name);
  const all3 = Object.fromEntries(names.map((n) => [n, '3']));
  check('Hystrix Dashboard (fleet): every command tile shows Hosts 3',
    (await poll(() => fleetHosts(readTheirs, names), (h) => JSON.stringify(h) === JSON.stringify(all3), 15000)).value, all3);
  for (const w of want) {
    const got = await readTheirs(w.name);
    const what = `Hystrix Dashboard (fleet) ${w.name}`;
    if (!got) {
      check(`${what}: tile`, null, `CIRCUIT_${w.name}_0`);
      continue;
    }
    check(`${what}: cluster rate, the instances' sum`, got.rate, roundNumber(w.rate));
    check(`${what}: rate per host`, got.hostRate, roundNumber(w.hostRate));
    check(`${what}: circuit`, got.circuit,
      w.open === w.hosts ? 'Circuit Open' : w.open === 0 ? 'Circuit Closed' : `Circuit Open ${w.open} Closed ${w.hosts - w.open}`);
    check(`${what}: error % per host`, got.errorPercentage, roundNumber(w.errorPercentage));
    for (const key of Object.keys(w.counters)) check(`${what}: ${key} summed`, number(got[key]), w.counters[key]);
    for (const key of Object.keys(w.latency)) check(`${what}: latency ${key} per host`, number(got[key]), w.latency[key]);
  }
  const theirPool = await readHystrixPool(theirs.page, pool);
  check(`Hystrix Dashboard (fleet) pool ${pool}: summed, queue size per host, cluster rate`,
    theirPool && [theirPool.Active, theirPool.Queued, theirPool['Pool Size'], theirPool['Max Active'], theirPool.Executions,
      theirPool['Queue Size'], theirPool.rate],
    [poolSum('active'), poolSum('queued'), poolSum('poolSize'), poolSum('maxActive'), poolSum('executions'),
      Math.floor(poolSum('queueSize') / 3), roundNumber(poolRate)].map(String));
  await theirs.page.screenshot({ path: path.join(ARTIFACTS, 'hystrix-dashboard-fleet.png'), fullPage: true });

  // (b) Our page on the same stream (?stream=, same origin: the Turbine is on the fixture's port).
  log('fleet: our page');
  const ours = await openTab(browser, 'our page (fleet)');
  tabs.push(ours);
  await ours.page.goto(`${url}/hystrix/dashboard/?stream=${encodeURIComponent(TURBINE_PATH)}`);
  await waitForTiles(ours, [...names.map((n) => `#${tileId('command', n)}`), `#${tileId('pool', pool)}`], perTick);
  const readOurs = async (name) => {
    const tile = await readOurTile(ours.page, 'command', name);
    return tile && { ...tile, hosts: tile.data.hosts };
  };
  check('our page (fleet): every command tile shows Hosts 3',
    (await poll(() => fleetHosts(readOurs, names), (h) => JSON.stringify(h) === JSON.stringify(all3), 15000)).value, all3);
  for (const w of want) {
    const got = await readOurs(w.name);
    const what = `our page (fleet) ${w.name}`;
    if (!got) {
      check(`${what}: tile`, null, tileId('command', w.name));
      continue;
    }
    const rate = w.rate.toFixed(1);
    const hostRate = (Math.round(w.hostRate * 10) / 10).toFixed(1);
    check(`${what}: hosts line`, got.hostsLine.text, `Hosts: 3 \u00b7 Host: ${hostRate}/s \u00b7 Cluster: ${rate}/s`);
    check(`${what}: cluster rate, the instances' sum`, [got.data.rate, got.shown.rate, got.data.clusterRate], [rate, rate, rate]);
    check(`${what}: rate per host`, got.data.hostRate, hostRate);
    const circuit = w.open === w.hosts ? ['open', 'Open'] : w.open === 0 ? ['closed', 'Closed']
      : ['partly-open', `Open ${w.open} Closed ${w.hosts - w.open}`];
    check(`${what}: circuit`, [got.data.circuit, got.shown.circuit], circuit);
    const errorPercentage = String(Math.round(w.errorPercentage * 10) / 10);
    check(`${what}: error % per host`, [got.data.errorPercentage, got.shown.errorPercentage], [errorPercentage, errorPercentage]);
    for (const key of Object.keys(w.counters)) {
      check(`${what}: ${key} summed`, [got.data[key], got.shown[key]], [String(w.counters[key]), commas(w.counters[key])]);
    }
    for (const key of Object.keys(w.latency)) {
      check(`${what}: latency ${key} per host`, [got.data[key], got.shown[key]], [String(w.latency[key]), String(w.latency[key])]);
    }
  }
  const ourPool = await readOurTile(ours.page, 'pool', pool);
  check(`our page (fleet) pool ${pool}: hosts, summed, queue size per host, cluster and host rate`,
    ourPool && ['hosts', 'active', 'queued', 'poolSize', 'maxActive', 'executions', 'queueSize', 'rate', 'hostRate']
      .map((key) => ourPool.data[key]),
    ['3', ...[poolSum('active'), poolSum('queued'), poolSum('poolSize'), poolSum('maxActive'), poolSum('executions'),
      Math.floor(poolSum('queueSize') / 3)].map(String), poolRate.toFixed(1), (Math.round(poolRate / 3 * 10) / 10).toFixed(1)]);
  const bad = await ours.page.evaluate(() => {
    const texts = [document.body.innerText];
    document.querySelectorAll('.tile').forEach((t) => texts.push(...Object.values(t.dataset)));
    return texts.filter((t) => /\[object Object\]|NaN|undefined/.test(t));
  });
  check('our page (fleet): no "[object Object]", NaN or undefined', bad, []);
  check('our page (fleet): reads the merged stream, breaker buttons off',
    await ours.page.evaluate(() => [document.getElementById('stream-name').textContent, document.body.dataset.admin]),
    [TURBINE_PATH, 'off']);
  await ours.page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-fleet.png'), fullPage: true });

  // A mistyped cluster: the page says what the server answered (EventSource cannot tell).
  const mistyped = await openTab(browser, 'our page (unknown cluster)');
  await mistyped.page.goto(`${url}/hystrix/dashboard/?stream=${encodeURIComponent('/turbine.stream?cluster=nope')}`);
  const told = await poll(
    () => mistyped.page.evaluate(() => {
      const node = document.getElementById('connection');
      return [node.dataset.state, node.textContent, document.body.dataset.stream];
    }),
    (v) => v[1].startsWith('stream refused: '),
    10000,
  );
  check('our page: an unknown cluster is refused with the server\'s reason', told.value,
    ['closed', 'stream refused: 404 unknown cluster `nope`; clusters: demo; retrying in 5 s', 'stale']);
  for (const tab of [theirs, ours, mistyped]) await tab.page.close();
}

// ----------------------------------------------------------------------------------------------
// The run

async function main() {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  const fixture = startFixture();
  let server;
  let launched;
  const tabs = [];
  try {
    const { url, plan, instances } = await fixture.ready;
    log(`fixture at ${url}: ${plan.commands.length} commands, ${plan.pools.length} pool, ${plan.collapsers.length} collapser`);
    const perTick = plan.commands.length + plan.pools.length + plan.collapsers.length;

    const info = await (await fetch(`${url}/hystrix/dashboard/info`)).json();
    check('info endpoint', info, { admin: 'token' });
    await checkStreamAttempts(url, plan);
    await checkMetricsAttempts(url, plan);
    const retried = plan.commands.filter((c) => c.retry > 0 && c.retryBudgetExhausted > 0).map((c) => c.name);
    check('the fixture drove retries and budget refusals', retried, ['GetShipping']);
    // Distinct counts, so that the two hedge counters cannot stand in for each other.
    const hedged = plan.commands.filter((c) => c.hedge > 0 || c.hedgeCancelled > 0)
      .map((c) => [c.name, c.hedge, c.hedgeCancelled]);
    check('the fixture drove hedges and cancelled hedged attempts', hedged, [['SearchProducts', 8, 6]]);
    const limited = plan.commands.filter((c) => c.limitRejected > 0 || c.adaptive)
      .map((c) => [c.name, c.limitRejected, adaptiveOf(c)]);
    check('the fixture drove refusals by an adaptive limit, held at the limit with one waiting', limited,
      [['ChargeCard', 3, [4, 4, 1]]]);
    const slowed = plan.commands.filter((c) => c.slowCall > 0 || c.slowCalls)
      .map((c) => [c.name, c.slowCall, c.slowCalls && c.slowCalls.percentage]);
    check('the fixture drove slow calls', slowed, [['GetRecommendations', 5, 20]]);
    const chaotic = plan.commands.filter((c) => c.chaosInjected > 0 || c.chaos)
      .map((c) => [c.name, c.chaosInjected, c.failure, c.chaos]);
    check('the fixture drove chaos and left it on', chaotic, [['ApplyCoupon', 3, 3,
      { faultRatePercentage: 10, latencyRatePercentage: 20, latencyMs: 100, hangRatePercentage: 5 }]]);

    server = await serveHystrixDashboard();
    launched = await launch();
    const { browser } = launched;
    log(`chromium ${await browser.version()}`);

    // (a) The real Hystrix Dashboard on our stream.
    const hystrix = await openTab(browser, 'Hystrix Dashboard');
    tabs.push(hystrix);
    const stream = encodeURIComponent(`${url}/hystrix.stream`);
    await hystrix.page.goto(
      `http://127.0.0.1:${server.address().port}/monitor/monitor.html?stream=${stream}&title=hystrix-rs`,
    );
    await waitForTiles(hystrix, [
      ...plan.commands.map((c) => `#CIRCUIT_${c.name}_0`),
      ...plan.pools.map((p) => `#THREAD_POOL_${p.name}_0`),
    ], perTick);
    for (const want of plan.commands) checkHystrixCommand(want, await readHystrixCommand(hystrix.page, want.name));
    for (const want of plan.pools) checkHystrixPool(want, await readHystrixPool(hystrix.page, want.name));
    // Its rendering is Hystrix's own, whatever our page does: sorted by error then volume (the
    // OPEN GetStock at 10 % and the HALF_OPEN GetReviews at 9 % among the closed ones) and the
    // circle coloured by the error percentage alone (GetStock's green, at 10 %).
    check('Hystrix Dashboard: default order (error then volume)', await hystrixCommandOrder(hystrix.page),
      ['SendEmail', 'GetShipping', 'GetAvatar', 'SaveOrder', 'GetPrices', 'CheckInventory', 'ApplyCoupon', 'GetStock', 'GetReviews', 'SearchProducts', 'GetUser', 'GetRecommendations', 'GetRatings', 'ChargeCard']);
    const circles = await poll(
      () => hystrixCircleFills(hystrix.page, ['GetStock', 'SendEmail']),
      (fills) => fills.GetStock === 'rgb(0, 128, 0)' && fills.SendEmail === 'rgb(255, 0, 0)',
      5000,
    );
    check('Hystrix Dashboard: circles coloured by error percentage', circles.value,
      { GetStock: 'rgb(0, 128, 0)', SendEmail: 'rgb(255, 0, 0)' });
    await hystrix.page.screenshot({ path: path.join(ARTIFACTS, 'hystrix-dashboard.png'), fullPage: true });

    // (b) Our page, reached through the fixture's `/`.
    const ours = await openTab(browser, 'our page');
    tabs.push(ours);
    await ours.page.goto(`${url}/`);
    check('our page: / redirects to the page', new URL(ours.page.url()).pathname, '/hystrix/dashboard/');
    await waitForTiles(ours, [
      ...plan.commands.map((c) => `#${tileId('command', c.name)}`),
      ...plan.pools.map((p) => `#${tileId('pool', p.name)}`),
      ...plan.collapsers.map((c) => `#${tileId('collapser', c.name)}`),
    ], perTick);
    for (const want of plan.commands) checkOurCommand(want, await readOurTile(ours.page, 'command', want.name));
    for (const want of plan.pools) checkOurPool(want, await readOurTile(ours.page, 'pool', want.name));
    for (const want of plan.collapsers) checkOurCollapser(want, await readOurTile(ours.page, 'collapser', want.name));

    // Hystrix's colour scale on the error percentage (clamped: green below 10 %, red above 50 %).
    const dots = {};
    for (const name of ['GetUser', 'SaveOrder', 'GetAvatar', 'SendEmail']) {
      dots[name] = (await readOurTile(ours.page, 'command', name)).dot;
    }
    check('our page: health colours at 0, 25, 30 and 100 %', dots, {
      GetUser: 'rgb(0, 128, 0)',
      SaveOrder: 'rgb(255, 204, 0)',
      GetAvatar: 'rgb(255, 187, 0)',
      SendEmail: 'rgb(255, 0, 0)',
    });

    // A circuit that is not closed colours its whole tile (red OPEN, amber HALF_OPEN) whatever
    // its error percentage; the dot and the error percentage keep Hystrix's scale (GetStock,
    // OPEN at 10 %, has a green dot). A closed tile's left border is its health colour.
    const circuitColours = {};
    for (const name of ['GetStock', 'GetReviews', 'SendEmail', 'GetUser']) {
      const tile = await readOurTile(ours.page, 'command', name);
      circuitColours[name] = { border: tile.border, background: tile.background, dot: tile.dot };
    }
    check('our page: circuit colours (OPEN red, HALF_OPEN amber, CLOSED by health)', circuitColours, {
      GetStock: { border: ['rgb(255, 0, 0)', 'rgb(255, 0, 0)'], background: 'rgb(255, 238, 238)', dot: 'rgb(0, 128, 0)' },
      GetReviews: { border: ['rgb(255, 170, 0)', 'rgb(255, 170, 0)'], background: 'rgb(255, 246, 224)', dot: 'rgb(0, 128, 0)' },
      SendEmail: { border: ['rgb(255, 0, 0)', 'rgb(255, 0, 0)'], background: 'rgb(255, 238, 238)', dot: 'rgb(255, 0, 0)' },
      GetUser: { border: ['rgb(216, 216, 216)', 'rgb(0, 128, 0)'], background: 'rgb(255, 255, 255)', dot: 'rgb(0, 128, 0)' },
    });

    // Sorting, as the Hystrix Dashboard sorts (descending but alphabetical; ties by name),
    // except that the default sort puts circuits that are not closed (OPEN, HALF_OPEN) first.
    const orders = {
      errorThenVolume: ['SendEmail', 'GetStock', 'GetReviews', 'GetShipping', 'GetAvatar', 'SaveOrder', 'GetPrices', 'CheckInventory', 'ApplyCoupon', 'SearchProducts', 'GetUser', 'GetRecommendations', 'GetRatings', 'ChargeCard'],
      alphabetical: ['ApplyCoupon', 'ChargeCard', 'CheckInventory', 'GetAvatar', 'GetPrices', 'GetRatings', 'GetRecommendations', 'GetReviews', 'GetShipping', 'GetStock', 'GetUser', 'SaveOrder', 'SearchProducts', 'SendEmail'],
      volume: ['GetUser', 'SaveOrder', 'GetShipping', 'SearchProducts', 'GetStock', 'ApplyCoupon', 'GetRecommendations', 'GetReviews', 'GetAvatar', 'GetPrices', 'CheckInventory', 'SendEmail', 'GetRatings', 'ChargeCard'],
      error: ['SendEmail', 'GetShipping', 'GetAvatar', 'SaveOrder', 'GetPrices', 'CheckInventory', 'ApplyCoupon', 'GetStock', 'GetReviews', 'SearchProducts', 'ChargeCard', 'GetRatings', 'GetRecommendations', 'GetUser'],
      mean: ['ApplyCoupon', 'GetPrices', 'GetRecommendations', 'SearchProducts', 'ChargeCard', 'GetUser', 'GetReviews', 'SaveOrder', 'GetStock', 'GetShipping', 'CheckInventory', 'GetAvatar', 'SendEmail', 'GetRatings'],
      median: ['ApplyCoupon', 'ChargeCard', 'GetPrices', 'GetRecommendations', 'SearchProducts', 'GetReviews', 'SaveOrder', 'GetStock', 'CheckInventory', 'GetShipping', 'GetAvatar', 'GetUser', 'SendEmail', 'GetRatings'],
      p90: ['GetPrices', 'GetRecommendations', 'ApplyCoupon', 'SearchProducts', 'GetUser', 'ChargeCard', 'GetReviews', 'SaveOrder', 'GetStock', 'CheckInventory', 'GetShipping', 'GetAvatar', 'SendEmail', 'GetRatings'],
      p99: ['GetPrices', 'GetUser', 'GetRecommendations', 'ApplyCoupon', 'SearchProducts', 'ChargeCard', 'GetReviews', 'SaveOrder', 'GetStock', 'CheckInventory', 'GetShipping', 'GetAvatar', 'SendEmail', 'GetRatings'],
      p995: ['GetUser', 'GetPrices', 'GetRecommendations', 'ApplyCoupon', 'SearchProducts', 'ChargeCard', 'GetReviews', 'SaveOrder', 'GetStock', 'CheckInventory', 'GetShipping', 'GetAvatar', 'SendEmail', 'GetRatings'],
    };

    check('our page: default order (circuits not closed first, then error then volume)',
      await commandOrder(ours.page), orders.errorThenVolume);
    for (const [sort, want] of Object.entries(orders)) {
      await ours.page.click(`#command-sort button[data-sort="${sort}"]`);
      check(`our page: sorted by ${sort}`, await commandOrder(ours.page), want);
    }
    await ours.page.click('#command-sort button[data-sort="errorThenVolume"]');
    await ours.page.screenshot({ path: path.join(ARTIFACTS, 'dashboard.png'), fullPage: true });

    // (d) The fleet: both dashboards on the Turbine's merged stream of the three instances,
    // before the admin buttons below change the first instance's SaveOrder (its reset empties
    // its window, so its plan holds no more).
    await checkFleet(browser, server, url, instances, tabs);
    // Back to the first instance's tab: a background tab shows no prompt.
    await ours.page.bringToFront();

    // Admin buttons: a wrong token is refused (401) and forgotten; the right one opens the
    // circuit, and both dashboards show it.
    const admin = await ours.page.evaluate(() => document.body.dataset.admin);
    check('our page: admin mode', admin, 'token');
    const saveOrder = `#${tileId('command', 'SaveOrder')}`;
    const adminStatus = () => ours.page.$eval(`${saveOrder} .admin-status`, (n) => n.dataset.status || '');
    const press = async (action, token) => {
      ours.onDialog = (dialog) => (dialog.type() === 'prompt' ? dialog.accept(token) : dialog.accept());
      await ours.page.click(`${saveOrder} button[data-action="${action}"]`);
    };
    ours.expectRefused.push('401 /hystrix/admin/circuit/SaveOrder/force-open');
    await press('force-open', WRONG_TOKEN);
    check('our page: a wrong token is refused', (await poll(adminStatus, (s) => s !== '', 5000)).value, '401');
    await press('force-open', TOKEN);
    check('our page: force-open accepted', (await poll(adminStatus, (s) => s === '200', 5000)).value, '200');
    const ourCircuit = () => ours.page.$eval(saveOrder, (n) => [n.dataset.circuit, n.querySelector('[data-field=circuit]').textContent]);
    const theirCircuit = async () => {
      const tile = await readHystrixCommand(hystrix.page, 'SaveOrder');
      return tile && tile.circuit;
    };
    check('our page: SaveOrder opens', (await poll(ourCircuit, (v) => v[0] === 'open', 5000)).value, ['open', 'Open']);
    check('Hystrix Dashboard: SaveOrder opens', (await poll(theirCircuit, (v) => v === 'Circuit Open', 5000)).value, 'Circuit Open');
    await ours.page.screenshot({ path: path.join(ARTIFACTS, 'dashboard-forced-open.png'), fullPage: true });
    await press('force-close', 'no prompt expected: the token is kept');
    check('our page: SaveOrder closes', (await poll(ourCircuit, (v) => v[0] === 'closed', 5000)).value, ['closed', 'Closed']);
    check('Hystrix Dashboard: SaveOrder closes', (await poll(theirCircuit, (v) => v === 'Circuit Closed', 5000)).value, 'Circuit Closed');
    await press('reset', 'no prompt expected');
    const resetText = await poll(() => ours.page.$eval(`${saveOrder} .admin-status`, (n) => n.textContent), (t) => t === 'reset: closed', 5000);
    check('our page: reset answered', resetText.value, 'reset: closed');
    // Done with the first instance's own stream: fewer streams on two cores.
    await hystrix.page.close();
    await ours.page.close();

    // (c) Turbine's forms, hand-made, in both dashboards; another origin refused.
    await checkSyntheticFleet(browser, server, url, tabs);
  } finally {
    // Also after a failure: the console says why tiles are missing ("Key Missing").
    tabs.forEach(checkConsole);
    if (launched) {
      await launched.browser.close().catch(() => {});
      fs.rmSync(launched.userDataDir, { recursive: true, force: true });
    }
    if (server) server.close();
    fixture.child.stdin.end();
    fixture.child.kill();
  }
}

const watchdog = setTimeout(() => {
  log(`browser tier: timed out after ${WATCHDOG_MS / 1000} s`);
  process.exit(1);
}, WATCHDOG_MS);

main()
  .catch((error) => failures.push(`harness: ${error.stack || error}`))
  .finally(() => {
    clearTimeout(watchdog);
    for (const failure of failures) log(`FAIL ${failure}`);
    log(`screenshots in ${ARTIFACTS}`);
    log(`${passed} passed, ${failures.length} failed`);
    process.exit(failures.length === 0 ? 0 : 1);
  });
