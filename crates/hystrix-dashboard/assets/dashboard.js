// The hystrix-rs web dashboard: reads /hystrix.stream and keeps a tile per command, thread
// pool and collapser. Every URL is relative to the page (served at <prefix>/hystrix/dashboard/),
// so the page works wherever the router is nested. Tiles have stable ids
// (tile-command-<name>, tile-pool-<name>, tile-collapser-<name>, whitespace as "_") and carry
// the numbers they show in data-* attributes.
//
// `?stream=PATH` reads another stream of the page's own origin instead, e.g. a Turbine's
// merged `/turbine.stream?cluster=demo` (a URL of another origin is refused, with a message:
// the page connects to the stream itself and is no proxy). A merged message is read as the
// Hystrix Dashboard reads it: `reportingHosts` is the number of hosts, the numbers are sums
// over them (error percentage, latencies, slow-call percentage and throttling probability
// are shown per host: sum / hosts), a value the hosts disagree on is Turbine's object of
// counts by value (shown as "mixed (VALUE: HOSTS, ...)"), command and collapser properties
// are per host already, thread-pool properties are sums, and `deleteData: "true"` removes
// the tile.
(function () {
  'use strict';

  var STREAM_URL = '../../hystrix.stream';
  var INFO_URL = 'info';
  var CIRCUIT_URL = '../admin/circuit/';
  var TOKEN_KEY = 'hystrix-dashboard-admin-token';
  var SPARK_WINDOW_MS = 2 * 60 * 1000; // as the Hystrix Dashboard: the last two minutes
  var SPARK_MAX_POINTS = 200;
  var LIMIT_SPARK_POINTS = 60; // the adaptive limit's sparkline: the last 60 messages
  var RESORT_EVERY_MS = 10000; // tiles move at most this often (as the Hystrix Dashboard)
  var RETRY_AFTER_MS = 5000; // a refused stream (503) is tried again after this

  // Hystrix's colour scales: the circle on the error percentage, and the error text.
  var HEALTH_SCALE = [[10, [0, 128, 0]], [25, [255, 204, 0]], [40, [255, 153, 0]], [50, [255, 0, 0]]];
  var ERROR_TEXT_SCALE = [[0, [128, 128, 128]], [10, [0, 0, 0]], [35, [255, 153, 0]], [50, [255, 0, 0]]];

  var COMMAND_COUNTERS = [
    ['success', 'success', 'Successful requests'],
    ['shortCircuited', 'short-circuited', 'Short-circuited requests (circuit open)'],
    ['badRequest', 'bad request', 'Bad requests (not counted as errors)'],
    ['timeout', 'timeout', 'Timed-out requests'],
    ['rejected', 'rejected', 'Thread pool and semaphore rejections'],
    ['failure', 'failure', 'Failed requests']
  ];
  var LATENCIES = [['mean', 'Mean'], ['p50', 'Median'], ['p90', '90th'], ['p99', '99th'], ['p995', '99.5th']];
  var POOL_FIELDS = [
    ['active', 'active'], ['queued', 'queued'], ['poolSize', 'pool size'],
    ['maxActive', 'max active'], ['executions', 'executions'], ['rejections', 'rejections'],
    ['queueSize', 'queue size']
  ];
  var COLLAPSER_COUNTERS = [['batches', 'batches'], ['requestsBatched', 'requests'], ['fromCache', 'from cache']];
  var COLLAPSER_FIELDS = COLLAPSER_COUNTERS.concat(LATENCIES);

  // A circuit that is not closed short-circuits calls, which are not requests: its error
  // percentage can read 0 while every call is refused. So the default sort puts such tiles
  // first, then sorts as the Hystrix Dashboard (error percentage, then volume).
  var CIRCUIT_FIRST = 1e12;
  var COMMAND_SORTS = {
    errorThenVolume: function (v) { return (v.circuitClosed ? 0 : CIRCUIT_FIRST) + v.errorPercentage * 1e8 + v.rate; },
    volume: function (v) { return v.rate; },
    error: function (v) { return v.errorPercentage; },
    mean: function (v) { return v.mean; },
    median: function (v) { return v.p50; },
    p90: function (v) { return v.p90; },
    p99: function (v) { return v.p99; },
    p995: function (v) { return v.p995; }
  };
  var POOL_SORTS = { volume: function (v) { return v.rate; } };

  // One kind of tile: its container, its tiles by name, and how they are sorted.
  function Kind(prefix, containerId, countId, sorts, sort) {
    this.prefix = prefix;
    this.container = document.getElementById(containerId);
    this.count = document.getElementById(countId);
    this.sorts = sorts;
    this.sort = sort;
    this.tiles = new Map();
  }
  var kinds = {
    HystrixCommand: new Kind('command', 'command-tiles', 'command-count', COMMAND_SORTS, 'errorThenVolume'),
    HystrixThreadPool: new Kind('pool', 'pool-tiles', 'pool-count', POOL_SORTS, 'alphabetical'),
    HystrixCollapser: new Kind('collapser', 'collapser-tiles', 'collapser-count', {}, 'alphabetical')
  };
  var filterText = '';
  var adminMode = null;
  var stream = chosenStream();
  var resortPending = false;

  // ---------------------------------------------------------------------------------------
  // Small helpers

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function svg(tag) {
    return document.createElementNS('http://www.w3.org/2000/svg', tag);
  }

  function num(value) {
    var n = Number(value);
    return isFinite(n) ? n : 0;
  }

  // Turbine's form of a string, bool or property value its hosts disagree on: an object of
  // host counts by value, e.g. {"THREAD": 2, "SEMAPHORE": 1}.
  function isCounts(value) {
    return value !== null && typeof value === 'object' && !Array.isArray(value);
  }

  // A value as shown: Turbine's counts as 'mixed (SEMAPHORE: 1, THREAD: 2)' (values in order),
  // a missing one as a dash, anything else as its text.
  function shown(value) {
    if (isCounts(value)) {
      return 'mixed (' + Object.keys(value).sort().map(function (key) {
        return key + ': ' + num(value[key]);
      }).join(', ') + ')';
    }
    return value === undefined || value === null ? '\u2013' : String(value);
  }

  // A command or collapser property number (per host already: Turbine does not sum them) as
  // shown, with at most two decimals (10, 0.5, 12.25); Turbine's counts as shown().
  function propertyText(value) {
    return isCounts(value) ? shown(value) : String(Math.round(num(value) * 100) / 100);
  }

  // On how many of `hosts` a bool is true: true on all, false on none, or Turbine's counts.
  function hostsTrue(value, hosts) {
    if (isCounts(value)) return num(value['true']);
    return value === true || value === 'true' ? hosts : 0;
  }

  // A command's rolling window in ms: per host already; when the hosts disagree (Turbine's
  // counts), their mean weighted by hosts, so the rates are near, not exact.
  function windowOf(value) {
    if (!isCounts(value)) return num(value);
    var hosts = 0, sum = 0;
    Object.keys(value).forEach(function (key) {
      hosts += num(value[key]);
      sum += num(key) * num(value[key]);
    });
    return hosts > 0 ? sum / hosts : 0;
  }

  // The number of hosts a message sums over (1 when absent, as the Hystrix Dashboard).
  function hostsOf(m) {
    return num(m.reportingHosts) || 1;
  }

  function commas(n) {
    return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  }

  function oneDecimal(n) {
    return (Math.round(n * 10) / 10).toFixed(1);
  }

  // A colour on a piecewise-linear scale, clamped at both ends.
  function colourOn(scale, value) {
    var rgb = scale[scale.length - 1][1];
    if (value <= scale[0][0]) {
      rgb = scale[0][1];
    } else {
      for (var i = 1; i < scale.length; i++) {
        if (value <= scale[i][0]) {
          var lo = scale[i - 1], hi = scale[i];
          var t = (value - lo[0]) / (hi[0] - lo[0]);
          rgb = lo[1].map(function (c, j) { return Math.round(c + (hi[1][j] - c) * t); });
          break;
        }
      }
    }
    return 'rgb(' + rgb.join(', ') + ')';
  }

  // Rate per second over the rolling window, as the Hystrix Dashboard computes it.
  function ratePerSecond(count, windowMs) {
    var seconds = num(windowMs) / 1000;
    return seconds > 0 ? Math.max(0, num(count)) / seconds : 0;
  }

  function idFor(prefix, name) {
    return 'tile-' + prefix + '-' + String(name).replace(/\s/g, '_');
  }

  // A labelled number: <span class="cell KEY"><b data-field="KEY">0</b> label</span>.
  function cell(key, label, title, cls) {
    var span = el('span', 'cell zero ' + (cls || key));
    if (title) span.title = title;
    var value = el('b', null, '0');
    value.dataset.field = key;
    span.appendChild(value);
    span.appendChild(el('span', 'label', label));
    return span;
  }

  // A rate: <span class="rate"><b data-field="rate">0.0</b>/s</span>.
  function rateBox(title) {
    var rate = el('span', 'rate');
    rate.title = title;
    var value = el('b', null, '0.0');
    value.dataset.field = 'rate';
    rate.appendChild(value);
    rate.appendChild(document.createTextNode('/s'));
    return rate;
  }

  // The hosts a tile sums over and (unless `what` is null) its rate per host and for the
  // cluster, as the Hystrix Dashboard shows them: 'Hosts: 3 \u00b7 Host: 6.7/s \u00b7
  // Cluster: 20.0/s' (one host on an instance's own stream).
  function hostsLine(what) {
    var line = el('div', 'hosts');
    line.title = 'Hosts reporting (Turbine\'s reportingHosts; 1 on an instance\'s own stream)'
      + (what ? ', and ' + what + ' per second per host and for the whole cluster over the rolling window' : '');
    var parts = [['Hosts: ', 'hosts', '1']];
    if (what) parts.push([' \u00b7 Host: ', 'hostRate', '0.0'], ['/s \u00b7 Cluster: ', 'clusterRate', '0.0']);
    parts.forEach(function (part) {
      line.appendChild(document.createTextNode(part[0]));
      var value = el('b', null, part[2]);
      value.dataset.field = part[1];
      line.appendChild(value);
    });
    if (what) line.appendChild(document.createTextNode('/s'));
    return line;
  }

  // Shows the hosts line: `rate` is the cluster's (null: none shown).
  function showHosts(tile, hosts, rate) {
    var node = tile.node;
    node.dataset.hosts = String(hosts);
    setField(tile, 'hosts', String(hosts));
    if (rate === null) return;
    node.dataset.hostRate = oneDecimal(rate / hosts);
    node.dataset.clusterRate = oneDecimal(rate);
    setField(tile, 'hostRate', oneDecimal(rate / hosts));
    setField(tile, 'clusterRate', oneDecimal(rate));
  }

  // Shows a value; a counter at zero is dimmed, so the ones that count stand out.
  function setField(tile, key, text) {
    var node = tile.fields[key];
    if (!node || node.textContent === text) return;
    node.textContent = text;
    if (node.parentNode.classList.contains('cell')) node.parentNode.classList.toggle('zero', text === '0');
  }

  // ---------------------------------------------------------------------------------------
  // Tiles

  function newTile(kind, name) {
    var node = el('article', 'tile ' + kind.prefix);
    node.id = idFor(kind.prefix, name);
    node.dataset.name = name;
    var head = el('header', 'tile-head');
    var dot = el('span', 'dot');
    var title = el('h3', 'name', name);
    title.title = name;
    head.appendChild(dot);
    head.appendChild(title);
    node.appendChild(head);
    var tile = { name: name, node: node, head: head, dot: dot, title: title, fields: {}, values: {} };
    return tile;
  }

  function collectFields(tile) {
    var nodes = tile.node.querySelectorAll('[data-field]');
    for (var i = 0; i < nodes.length; i++) tile.fields[nodes[i].dataset.field] = nodes[i];
  }

  function grid(className, cells) {
    var div = el('div', className);
    cells.forEach(function (c) { div.appendChild(c); });
    return div;
  }

  // A line of rates per second (`parts`: each [the text before the rate, its data field]):
  // each rate "0.0" and the line dimmed (class "zero") until a message is shown.
  function ratesLine(className, title, parts) {
    var line = el('div', className + ' zero');
    line.title = title;
    parts.forEach(function (part) {
      line.appendChild(document.createTextNode(part[0]));
      var value = el('b', null, '0.0');
      value.dataset.field = part[1];
      line.appendChild(value);
    });
    line.appendChild(document.createTextNode('/s'));
    return line;
  }

  // The adaptive concurrency limit (adaptiveLimit, adaptiveLimitInFlight, adaptiveLimitQueued
  // of our stream) and the executions it refused per second (rollingCountLimitRejected over
  // the rolling window), on two rows: the limit with a sparkline of it over the last
  // LIMIT_SPARK_POINTS messages, then in flight, queued and refused. Hidden while the command
  // has no adaptive limit and refused nothing in the window.
  function limitLine(tile) {
    var line = el('div', 'limit');
    line.title = 'Adaptive concurrency limit: the limit in force (the sparkline: the last ' + LIMIT_SPARK_POINTS + ' stream messages), executions in flight under it, executions waiting for a place, and executions it refused per second over the rolling window';
    var value = function (row, text, field, initial) {
      row.appendChild(document.createTextNode(text));
      var b = el('b', null, initial);
      b.dataset.field = field;
      row.appendChild(b);
    };
    var head = el('div', 'limit-head');
    var label = el('span');
    value(label, 'Limit ', 'adaptiveLimit', '\u2013');
    head.appendChild(label);
    var spark = svg('svg');
    spark.setAttribute('class', 'limit-spark');
    spark.setAttribute('viewBox', '0 0 60 14');
    spark.setAttribute('preserveAspectRatio', 'none');
    spark.setAttribute('aria-label', 'Adaptive limit, last ' + LIMIT_SPARK_POINTS + ' stream messages');
    var polyline = svg('polyline');
    spark.appendChild(polyline);
    head.appendChild(spark);
    line.appendChild(head);
    var counts = el('div', 'limit-counts');
    value(counts, 'in flight ', 'adaptiveLimitInFlight', '\u2013');
    value(counts, ' \u00b7 queued ', 'adaptiveLimitQueued', '\u2013');
    value(counts, ' \u00b7 rejected ', 'limitRejectedRate', '0.0');
    counts.appendChild(document.createTextNode('/s'));
    line.appendChild(counts);
    line.hidden = true;
    tile.limit = line;
    tile.limitSpark = polyline;
    tile.limits = [];
    return line;
  }

  // Executions by priority class (priority*InFlight and priority*Refused of our stream, present
  // while a priority reserve is set): in flight now and refused since start, CRITICAL, NORMAL,
  // SHEDDABLE. Hidden while the command has no reserve.
  var PRIORITY_CLASSES = [['Critical', 'C'], ['Normal', 'N'], ['Sheddable', 'S']];
  function priorityLine(tile) {
    var line = el('div', 'priority');
    line.title = 'Priorities: executions in flight and refused (since start) by class, CRITICAL / NORMAL / SHEDDABLE';
    var part = function (text, prefix) {
      line.appendChild(document.createTextNode(text));
      PRIORITY_CLASSES.forEach(function (c, i) {
        if (i > 0) line.appendChild(document.createTextNode(' \u00b7 '));
        line.appendChild(document.createTextNode(c[1] + ' '));
        var b = el('b', null, '\u2013');
        b.dataset.field = prefix + c[0] + (prefix === 'priorityIn' ? 'Flight' : '');
        line.appendChild(b);
      });
    };
    part('In flight ', 'priorityIn');
    part(' | refused ', 'priorityRefused');
    line.hidden = true;
    tile.priority = line;
    return line;
  }

  // Shows the priority line from message `m` (hidden when it has no priority fields).
  function showPriorities(tile, m) {
    var node = tile.node;
    var on = typeof m.priorityCriticalInFlight === 'number';
    tile.priority.hidden = !on;
    PRIORITY_CLASSES.forEach(function (c) {
      var inFlight = 'priority' + c[0] + 'InFlight';
      var refused = 'priority' + c[0] + 'Refused';
      setField(tile, 'priorityIn' + c[0] + 'Flight', on ? commas(num(m[inFlight])) : '\u2013');
      setField(tile, 'priorityRefused' + c[0], on ? commas(num(m[refused])) : '\u2013');
      if (on) {
        node.dataset[inFlight] = String(num(m[inFlight]));
        node.dataset[refused] = String(num(m[refused]));
      } else {
        delete node.dataset[inFlight];
        delete node.dataset[refused];
      }
    });
  }

  // Shows the adaptive limit's line: `limit` is null when the command has none.
  function showLimit(tile, limit, inFlight, queued, rejected, rejectedRate) {
    var node = tile.node;
    var on = limit !== null;
    tile.limit.hidden = !on && rejected === 0;
    tile.limit.classList.toggle('zero', rejected === 0);
    node.dataset.limitRejected = String(rejected);
    node.dataset.limitRejectedRate = oneDecimal(rejectedRate);
    setField(tile, 'limitRejectedRate', oneDecimal(rejectedRate));
    [['adaptiveLimit', limit], ['adaptiveLimitInFlight', inFlight], ['adaptiveLimitQueued', queued]]
      .forEach(function (pair) {
        if (on) node.dataset[pair[0]] = String(pair[1]);
        else delete node.dataset[pair[0]];
        setField(tile, pair[0], on ? String(pair[1]) : '\u2013');
      });
    // The limit over the last messages; a command whose limit was turned off starts over.
    if (on) tile.limits.push(limit);
    else tile.limits = [];
    while (tile.limits.length > LIMIT_SPARK_POINTS) tile.limits.shift();
    node.dataset.adaptiveLimitHistory = tile.limits.join(',');
    // Scaled to the highest limit shown, which sits at 80 % of the height; newest at the right.
    var max = tile.limits.reduce(function (m, v) { return Math.max(m, v); }, 0) || 1;
    var last = tile.limits.length - 1;
    tile.limitSpark.setAttribute('points', tile.limits.map(function (v, i) {
      return (60 - (last - i) * 60 / (LIMIT_SPARK_POINTS - 1)).toFixed(1) + ',' + (14 - v / max * 11).toFixed(1);
    }).join(' '));
  }

  // A hidden line of labelled values ending in '/s': each part is [text before, field,
  // initial value].
  function valuesLine(className, title, parts) {
    var line = el('div', className);
    line.title = title;
    parts.forEach(function (part) {
      line.appendChild(document.createTextNode(part[0]));
      var value = el('b', null, part[2]);
      value.dataset.field = part[1];
      line.appendChild(value);
    });
    line.appendChild(document.createTextNode('/s'));
    line.hidden = true;
    return line;
  }

  // Client-side adaptive throttling (throttleProbability and rollingCountThrottled of our
  // stream): the probability with which the next attempt is refused locally, and the attempts
  // it refused per second over the rolling window. Hidden while the command has no throttling
  // and throttled nothing in the window.
  function throttleLine(tile) {
    tile.throttle = valuesLine('limit throttle',
      'Adaptive throttling (Google SRE book, Handling Overload): the probability max(0, (requests \u2212 K\u00b7accepts) / (requests + 1)) with which the next attempt is refused locally, and the attempts it refused per second over the rolling window',
      [['Throttle p ', 'throttleProbability', '\u2013'], [' \u00b7 throttled ', 'throttledRate', '0.0']]);
    return tile.throttle;
  }

  // Shows the throttling line: `probability` is null when the command has no throttling.
  function showThrottle(tile, probability, throttled, throttledRate) {
    var node = tile.node;
    var on = probability !== null;
    tile.throttle.hidden = !on && throttled === 0;
    tile.throttle.classList.toggle('zero', throttled === 0);
    node.dataset.throttled = String(throttled);
    node.dataset.throttledRate = oneDecimal(throttledRate);
    setField(tile, 'throttledRate', oneDecimal(throttledRate));
    if (on) node.dataset.throttleProbability = probability.toFixed(2);
    else delete node.dataset.throttleProbability;
    setField(tile, 'throttleProbability', on ? probability.toFixed(2) : '\u2013');
  }

  // Slow calls (slowCallPercentage, the two propertyValue_circuitBreakerSlowCall* thresholds
  // and rollingCountSlowCall of our stream): the slow calls' percentage of the breaker's
  // requests, the percentage at which it trips, the duration over which a call is slow, and
  // the slow attempts per second over the rolling window. Hidden while the command has slow
  // calls off and had none in the window.
  function slowCallLine(tile) {
    tile.slowCalls = valuesLine('limit slow-calls',
      'Slow calls: the percentage of the breaker\'s requests slower than the threshold (the breaker trips when it reaches the rate threshold), and slow attempts per second over the rolling window',
      [['Slow ', 'slowCallPercentage', '\u2013'], [' % (trips at ', 'slowCallRateThreshold', '\u2013'],
        [' %, over ', 'slowCallDurationThreshold', '\u2013'], [' ms) \u00b7 ', 'slowCallRate', '0.0']]);
    return tile.slowCalls;
  }

  // Shows the slow-call line from message `m`: Turbine sums the percentage over `hosts` (shown
  // per host), not the thresholds (properties, per host already).
  function showSlowCalls(tile, m, hosts, windowMs) {
    var node = tile.node;
    var on = typeof m.slowCallPercentage === 'number';
    var slow = num(m.rollingCountSlowCall);
    var rate = ratePerSecond(slow, windowMs);
    tile.slowCalls.hidden = !on && slow === 0;
    tile.slowCalls.classList.toggle('zero', slow === 0);
    node.dataset.slowCalls = String(slow);
    node.dataset.slowCallRate = oneDecimal(rate);
    setField(tile, 'slowCallRate', oneDecimal(rate));
    [['slowCallPercentage', String(Math.floor(num(m.slowCallPercentage) / hosts))],
      ['slowCallRateThreshold', propertyText(m.propertyValue_circuitBreakerSlowCallRateThresholdPercentage)],
      ['slowCallDurationThreshold', propertyText(m.propertyValue_circuitBreakerSlowCallDurationThresholdInMilliseconds)]]
      .forEach(function (pair) {
        var text = on ? pair[1] : '\u2013';
        if (on) node.dataset[pair[0]] = text;
        else delete node.dataset[pair[0]];
        setField(tile, pair[0], text);
      });
    if (m.propertyValue_circuitBreakerWindowType !== undefined) {
      node.dataset.windowType = shown(m.propertyValue_circuitBreakerWindowType);
    } else {
      delete node.dataset.windowType;
    }
  }

  // Chaos injection (propertyValue_chaos* and rollingCountChaosInjected of our stream): while
  // a command's chaos is on, a line in the warning colour, so nobody forgets it is on, naming
  // each rate above 0 and the attempts injected into per second over the rolling window, e.g.
  // 'Chaos on: fault 10 % \u00b7 latency 20 % \u00d7 100 ms \u00b7 hang 5 % \u00b7 0.2/s injected'
  // (\u00b7 a middle dot, \u00d7 a times sign). Hidden while chaos is off.
  function chaosLine(tile) {
    var line = el('div', 'chaos');
    line.title = 'Chaos injection is on for this command: the percentage of attempts given an injected fault, an injected delay (and its length) or a hang, and the attempts injected into per second over the rolling window';
    var label = el('b', 'chaos-label', 'Chaos on:');
    var text = el('span', 'chaos-text', '');
    line.appendChild(label);
    line.appendChild(document.createTextNode(' '));
    line.appendChild(text);
    line.hidden = true;
    tile.chaos = line;
    tile.chaosText = text;
    return line;
  }

  // Shows the chaos line from message `m`: on while chaos is on on any of its `hosts` (the
  // line says on how many when not on all); the chaos rates are properties, per host already
  // (Turbine does not sum them; 'mixed (...)' when the hosts disagree).
  function showChaos(tile, m, hosts, windowMs) {
    var node = tile.node;
    var onHosts = hostsTrue(m.propertyValue_chaosEnabled, hosts);
    var on = onHosts > 0;
    var injected = num(m.rollingCountChaosInjected);
    var rate = oneDecimal(ratePerSecond(injected, windowMs));
    node.dataset.chaosInjected = String(injected);
    node.dataset.chaosInjectedRate = rate;
    tile.chaos.hidden = !on;
    node.classList.toggle('chaos-on', on);
    var raw = {
      chaosFaultRate: m.propertyValue_chaosFaultRatePercentage,
      chaosLatencyRate: m.propertyValue_chaosLatencyRatePercentage,
      chaosLatencyMs: m.propertyValue_chaosLatencyInMilliseconds,
      chaosHangRate: m.propertyValue_chaosHangRatePercentage
    };
    var values = {};
    // A rate is named when above 0 on some host.
    var named = {};
    Object.keys(raw).forEach(function (key) {
      values[key] = propertyText(raw[key]);
      named[key] = isCounts(raw[key]) || num(raw[key]) > 0;
    });
    Object.keys(values).forEach(function (key) {
      if (on) node.dataset[key] = values[key];
      else delete node.dataset[key];
    });
    if (!on) {
      delete node.dataset.chaos;
      return;
    }
    var parts = [];
    if (onHosts < hosts) parts.push('on ' + onHosts + ' of ' + hosts + ' hosts');
    if (named.chaosFaultRate) parts.push('fault ' + values.chaosFaultRate + ' %');
    if (named.chaosLatencyRate) {
      parts.push('latency ' + values.chaosLatencyRate + ' % \u00d7 ' + values.chaosLatencyMs + ' ms');
    }
    if (named.chaosHangRate) parts.push('hang ' + values.chaosHangRate + ' %');
    parts.push(rate + '/s injected');
    var text = parts.join(' \u00b7 ');
    node.dataset.chaos = 'Chaos on: ' + text;
    if (tile.chaosText.textContent !== text) tile.chaosText.textContent = text;
  }

  function commandTile(kind, name) {
    var tile = newTile(kind, name);
    var health = el('span', 'health');
    var error = el('span', 'error-percentage', '0');
    error.dataset.field = 'errorPercentage';
    var errorBox = el('span', 'error', '');
    errorBox.title = 'Error percentage: (failures + timeouts + rejections) / requests in the rolling window';
    errorBox.appendChild(error);
    errorBox.appendChild(document.createTextNode(' %'));
    health.appendChild(errorBox);
    // Shown while the circuit is not closed or calls were short-circuited in the window.
    var shortRate = el('span', 'short-circuit-rate');
    shortRate.title = 'Short-circuited calls per second over the rolling window (not requests, so not in the error percentage)';
    var shortValue = el('b', null, '0.0');
    shortValue.dataset.field = 'shortCircuitRate';
    shortRate.appendChild(shortValue);
    shortRate.appendChild(document.createTextNode('/s short-circuited'));
    shortRate.hidden = true;
    health.appendChild(shortRate);
    tile.head.appendChild(health);
    tile.errorText = errorBox;
    tile.shortRate = shortRate;

    var rateRow = el('div', 'rate-row');
    var spark = svg('svg');
    spark.setAttribute('class', 'spark');
    spark.setAttribute('viewBox', '0 0 120 24');
    spark.setAttribute('preserveAspectRatio', 'none');
    spark.setAttribute('aria-label', 'Request rate, last two minutes');
    var area = svg('polygon');
    var line = svg('polyline');
    spark.appendChild(area);
    spark.appendChild(line);
    tile.sparkArea = area;
    rateRow.appendChild(spark);
    rateRow.appendChild(rateBox('Requests per second over the rolling window'));
    tile.node.appendChild(rateRow);
    tile.node.appendChild(hostsLine('requests'));
    tile.spark = line;
    tile.points = [];

    var circuit = el('div', 'circuit');
    circuit.appendChild(document.createTextNode('Circuit '));
    var state = el('b', 'state', '');
    state.dataset.field = 'circuit';
    circuit.appendChild(state);
    var forced = el('span', 'forced-closed', '');
    circuit.appendChild(forced);
    tile.node.appendChild(circuit);
    tile.forced = forced;
    tile.node.appendChild(chaosLine(tile));

    // Retries (RETRY) and retries the retry budget refused (RETRY_BUDGET_EXHAUSTED), per
    // second over the rolling window; dimmed while both are 0.
    tile.retries = ratesLine('retries',
      'Retries per second, and retries the retry budget refused per second, over the rolling window (each attempt is a request)',
      [['Retries ', 'retryRate'], ['/s \u00b7 budget refused ', 'retryBudgetExhaustedRate']]);
    tile.node.appendChild(tile.retries);
    // Hedges (HEDGE) and hedged attempts cancelled (HEDGE_CANCELLED), per second over the
    // rolling window; dimmed while both are 0.
    tile.hedges = ratesLine('hedges',
      'Hedges per second (attempts started beside one still running after the hedging delay), and attempts cancelled per second because another attempt answered first, over the rolling window',
      [['Hedges ', 'hedgeRate'], ['/s \u00b7 cancelled ', 'hedgeCancelledRate']]);
    tile.node.appendChild(tile.hedges);
    tile.node.appendChild(limitLine(tile));
    tile.node.appendChild(priorityLine(tile));
    tile.node.appendChild(throttleLine(tile));
    tile.node.appendChild(slowCallLine(tile));

    tile.node.appendChild(grid('counters', COMMAND_COUNTERS.map(function (c) {
      return cell(c[0], c[1], c[2], c[1].replace(/ /g, '-'));
    })));
    var latency = grid('latency', LATENCIES.map(function (l) { return cell(l[0], l[1]); }));
    latency.title = 'Execution latency in ms over the rolling percentile window';
    tile.node.appendChild(latency);
    tile.node.appendChild(adminButtons(name));
    collectFields(tile);
    return tile;
  }

  function poolTile(kind, name) {
    var tile = newTile(kind, name);
    tile.head.appendChild(rateBox('Executions per second over the rolling window'));
    tile.node.appendChild(hostsLine('executions'));
    tile.node.appendChild(grid('fields', POOL_FIELDS.map(function (f) { return cell(f[0], f[1]); })));
    collectFields(tile);
    return tile;
  }

  function collapserTile(kind, name) {
    var tile = newTile(kind, name);
    tile.node.appendChild(hostsLine(null));
    tile.node.appendChild(grid('counters', COLLAPSER_COUNTERS.map(function (f) { return cell(f[0], f[1]); })));
    tile.node.appendChild(el('div', 'caption', 'batch size'));
    var sizes = grid('latency', LATENCIES.map(function (l) { return cell(l[0], l[1]); }));
    sizes.title = 'Requests per batch over the rolling percentile window';
    tile.node.appendChild(sizes);
    collectFields(tile);
    return tile;
  }

  function sparkline(tile, rate) {
    var now = Date.now();
    tile.points.push({ t: now, v: rate });
    while (tile.points.length > SPARK_MAX_POINTS || tile.points[0].t < now - SPARK_WINDOW_MS) {
      tile.points.shift();
    }
    // Scaled to the highest rate shown, which sits at 80 % of the height.
    var max = tile.points.reduce(function (m, p) { return Math.max(m, p.v); }, 0) || 1;
    var xs = [];
    var points = tile.points.map(function (p) {
      var x = (120 - (now - p.t) / SPARK_WINDOW_MS * 120).toFixed(1);
      xs.push(x);
      return x + ',' + (24 - p.v / max * 19).toFixed(1);
    }).join(' ');
    tile.spark.setAttribute('points', points);
    tile.sparkArea.setAttribute('points', xs[0] + ',24 ' + points + ' ' + xs[xs.length - 1] + ',24');
  }

  // What the circuit shows: Hystrix's rules (force-open wins; open while isCircuitBreakerOpen
  // equals the hosts, closed while it is 0, else 'Open n Closed m' from Turbine's counts
  // {"true": n, "false": m}), and HALF_OPEN from our stream's circuitBreakerStatus (Hystrix's
  // isCircuitBreakerOpen is true in OPEN and HALF_OPEN alike; a stream without the field shows
  // both as open). A single host's stream says true or false.
  function circuitOf(m, hosts) {
    var forced = hostsTrue(m.propertyValue_circuitBreakerForceOpen, hosts);
    if (forced >= hosts) return ['forced-open', 'Forced Open'];
    if (forced > 0) return ['forced-open', 'Forced Open ' + forced + ' of ' + hosts];
    var open = m.isCircuitBreakerOpen;
    var openHosts, closedHosts;
    if (isCounts(open)) {
      openHosts = num(open['true']);
      closedHosts = num(open['false']);
    } else {
      openHosts = open === true ? hosts : open === false ? 0 : num(open);
      closedHosts = hosts - openHosts;
    }
    if (openHosts <= 0) return ['closed', 'Closed'];
    if (closedHosts > 0) return ['partly-open', 'Open ' + openHosts + ' Closed ' + closedHosts];
    var keys = num(m.openBreakerKeys);
    var state = m.circuitBreakerStatus === 'HALF_OPEN' ? ['half-open', 'Half Open'] : ['open', 'Open'];
    if (keys > 0) state[1] += ' (' + keys + (keys === 1 ? ' key)' : ' keys)');
    return state;
  }

  // The tile's class for a circuit that is not closed: its border and background say so,
  // whatever the error percentage.
  var CIRCUIT_CLASSES = {
    open: 'circuit-open',
    'forced-open': 'circuit-open',
    'half-open': 'circuit-half-open',
    'partly-open': 'circuit-partly-open'
  };

  function showCommand(tile, m) {
    var hosts = hostsOf(m);
    var latency = m.latencyExecute || {};
    var windowMs = windowOf(m.propertyValue_metricsRollingStatisticalWindowInMilliseconds);
    var circuit = circuitOf(m, hosts);
    var rate = ratePerSecond(m.requestCount, windowMs);
    var v = {
      rate: rate,
      hostRate: rate / hosts,
      shortCircuitRate: ratePerSecond(m.rollingCountShortCircuited, windowMs),
      retry: num(m.rollingCountRetry),
      retryRate: ratePerSecond(m.rollingCountRetry, windowMs),
      retryBudgetExhausted: num(m.rollingCountRetryBudgetExhausted),
      retryBudgetExhaustedRate: ratePerSecond(m.rollingCountRetryBudgetExhausted, windowMs),
      hedge: num(m.rollingCountHedge),
      hedgeRate: ratePerSecond(m.rollingCountHedge, windowMs),
      hedgeCancelled: num(m.rollingCountHedgeCancelled),
      hedgeCancelledRate: ratePerSecond(m.rollingCountHedgeCancelled, windowMs),
      circuitClosed: circuit[0] === 'closed',
      // Per host, rounded to one decimal as the Hystrix Dashboard (10, 3.3).
      errorPercentage: Math.round(num(m.errorPercentage) / hosts * 10) / 10,
      requests: num(m.requestCount),
      success: num(m.rollingCountSuccess),
      shortCircuited: num(m.rollingCountShortCircuited),
      badRequest: num(m.rollingCountBadRequests),
      timeout: num(m.rollingCountTimeout),
      rejected: num(m.rollingCountThreadPoolRejected) + num(m.rollingCountSemaphoreRejected),
      failure: num(m.rollingCountFailure),
      mean: Math.floor(num(m.latencyExecute_mean) / hosts),
      p50: Math.floor(num(latency['50']) / hosts),
      p90: Math.floor(num(latency['90']) / hosts),
      p99: Math.floor(num(latency['99']) / hosts),
      p995: Math.floor(num(latency['99.5']) / hosts)
    };
    tile.values = v;
    var node = tile.node;
    var circuitClass = CIRCUIT_CLASSES[circuit[0]] || '';
    node.dataset.group = shown(m.group);
    node.dataset.isolation = shown(m.propertyValue_executionIsolationStrategy);
    node.dataset.circuit = circuit[0];
    Object.keys(CIRCUIT_CLASSES).forEach(function (key) {
      node.classList.toggle(CIRCUIT_CLASSES[key], circuitClass === CIRCUIT_CLASSES[key]);
    });
    showHosts(tile, hosts, v.rate);
    node.dataset.shortCircuitRate = oneDecimal(v.shortCircuitRate);
    setField(tile, 'shortCircuitRate', oneDecimal(v.shortCircuitRate));
    tile.shortRate.hidden = v.circuitClosed && v.shortCircuitRate === 0;
    var forcedClosed = hostsTrue(m.propertyValue_circuitBreakerForceClosed, hosts);
    node.dataset.forcedClosed = String(forcedClosed >= hosts);
    setField(tile, 'rate', oneDecimal(v.rate));
    node.dataset.rate = oneDecimal(v.rate);
    ['retryRate', 'retryBudgetExhaustedRate', 'hedgeRate', 'hedgeCancelledRate'].forEach(function (key) {
      node.dataset[key] = oneDecimal(v[key]);
      setField(tile, key, oneDecimal(v[key]));
    });
    ['retry', 'retryBudgetExhausted', 'hedge', 'hedgeCancelled'].forEach(function (key) {
      node.dataset[key] = String(v[key]);
    });
    tile.retries.classList.toggle('zero', v.retry === 0 && v.retryBudgetExhausted === 0);
    tile.hedges.classList.toggle('zero', v.hedge === 0 && v.hedgeCancelled === 0);
    // Turbine sums the limits, in-flight and queued counts: per host, their mean.
    var adaptive = typeof m.adaptiveLimit === 'number';
    var perHostMean = function (value) { return Math.round(num(value) / hosts); };
    showLimit(tile, adaptive ? perHostMean(m.adaptiveLimit) : null,
      perHostMean(m.adaptiveLimitInFlight), perHostMean(m.adaptiveLimitQueued),
      num(m.rollingCountLimitRejected), ratePerSecond(m.rollingCountLimitRejected, windowMs));
    showPriorities(tile, m);
    // Turbine sums the probabilities: per host, their mean.
    showThrottle(tile, typeof m.throttleProbability === 'number' ? m.throttleProbability / hosts : null,
      num(m.rollingCountThrottled), ratePerSecond(m.rollingCountThrottled, windowMs));
    showSlowCalls(tile, m, hosts, windowMs);
    showChaos(tile, m, hosts, windowMs);
    setField(tile, 'errorPercentage', String(v.errorPercentage));
    setField(tile, 'circuit', circuit[1]);
    tile.forced.textContent = forcedClosed >= hosts ? ' [Forced Closed]'
      : forcedClosed > 0 ? ' [Forced Closed ' + forcedClosed + ' of ' + hosts + ']' : '';
    ['errorPercentage', 'requests'].concat(COMMAND_COUNTERS.map(function (c) { return c[0]; }))
      .concat(LATENCIES.map(function (l) { return l[0]; }))
      .forEach(function (key) {
        node.dataset[key] = String(v[key]);
        if (key !== 'errorPercentage') setField(tile, key, commas(v[key]));
      });
    tile.title.title = m.name + ' (group ' + node.dataset.group + ', ' + node.dataset.isolation + ', ' + commas(v.requests) + ' requests in the window'
      + (hosts > 1 ? ' on ' + hosts + ' hosts' : '') + ')';
    var health = colourOn(HEALTH_SCALE, v.errorPercentage);
    tile.dot.style.backgroundColor = health;
    // As the Hystrix Dashboard's circle: on the rate per host.
    var size = Math.round(8 + 12 * Math.sqrt(Math.min(v.hostRate, 400) / 400));
    tile.dot.style.width = size + 'px';
    tile.dot.style.height = size + 'px';
    // Not closed: the style sheet's circuit colour, not the error percentage's.
    node.style.borderLeftColor = circuitClass ? '' : health;
    tile.errorText.style.color = colourOn(ERROR_TEXT_SCALE, v.errorPercentage);
    sparkline(tile, v.rate);
  }

  // A thread pool's message: Turbine sums every number of it, its properties too, so as the
  // Hystrix Dashboard's hystrixThreadPool.js the queue size and the window are per host (sum
  // / hosts, floored), the counts and gauges the cluster's.
  function showPool(tile, m) {
    var hosts = hostsOf(m);
    var windowMs = Math.floor(num(m.propertyValue_metricsRollingStatisticalWindowInMilliseconds) / hosts);
    var v = {
      rate: ratePerSecond(m.rollingCountThreadsExecuted, windowMs),
      active: num(m.currentActiveCount),
      maxActive: num(m.rollingMaxActiveThreads),
      queued: num(m.currentQueueSize),
      executions: num(m.rollingCountThreadsExecuted),
      poolSize: num(m.currentPoolSize),
      rejections: num(m.rollingCountCommandRejections),
      queueSize: Math.floor(num(m.propertyValue_queueSizeRejectionThreshold) / hosts)
    };
    tile.values = v;
    showHosts(tile, hosts, v.rate);
    tile.node.dataset.rate = oneDecimal(v.rate);
    setField(tile, 'rate', oneDecimal(v.rate));
    POOL_FIELDS.forEach(function (f) {
      tile.node.dataset[f[0]] = String(v[f[0]]);
      setField(tile, f[0], commas(v[f[0]]));
    });
    // As the Hystrix Dashboard: the pool's colour is its queue per host on the error scale.
    var health = colourOn(HEALTH_SCALE, v.queued / hosts);
    tile.dot.style.backgroundColor = health;
    tile.node.style.borderLeftColor = health;
  }

  // A collapser's message: counts summed over the hosts (the cluster's), batch sizes per host
  // (sum / hosts, floored, as latencies).
  function showCollapser(tile, m) {
    var hosts = hostsOf(m);
    var batch = m.batchSize || {};
    var perHost = function (value) { return Math.floor(num(value) / hosts); };
    var v = {
      rate: 0,
      batches: num(m.rollingCountBatches),
      requestsBatched: num(m.rollingCountRequestsBatched),
      fromCache: num(m.rollingCountResponsesFromCache),
      mean: perHost(m.batchSize_mean),
      p50: perHost(batch['50']),
      p90: perHost(batch['90']),
      p99: perHost(batch['99']),
      p995: perHost(batch['99.5'])
    };
    tile.values = v;
    showHosts(tile, hosts, null);
    COLLAPSER_FIELDS.forEach(function (f) {
      tile.node.dataset[f[0]] = String(v[f[0]]);
      setField(tile, f[0], commas(v[f[0]]));
    });
  }

  var BUILD = { HystrixCommand: commandTile, HystrixThreadPool: poolTile, HystrixCollapser: collapserTile };
  var SHOW = { HystrixCommand: showCommand, HystrixThreadPool: showPool, HystrixCollapser: showCollapser };

  function onMessage(event) {
    var m;
    try {
      m = JSON.parse(event.data);
    } catch (err) {
      return;
    }
    var kind = m && kinds[m.type];
    if (!kind || typeof m.name !== 'string') return;
    if (m.deleteData === 'true' || m.deleteData === true) {
      // Turbine: no host reports it any more.
      removeTile(kind, m.name);
      return;
    }
    var tile = kind.tiles.get(m.name);
    if (!tile) {
      tile = BUILD[m.type](kind, m.name);
      kind.tiles.set(m.name, tile);
      applyFilter(tile);
      kind.container.appendChild(tile.node);
      kind.count.textContent = String(kind.tiles.size);
      document.body.classList.add('has-data');
      SHOW[m.type](tile, m);
      scheduleResort();
    } else {
      SHOW[m.type](tile, m);
    }
  }

  function removeTile(kind, name) {
    var tile = kind.tiles.get(name);
    if (!tile) return;
    kind.tiles.delete(name);
    tile.node.remove();
    kind.count.textContent = String(kind.tiles.size);
  }

  // ---------------------------------------------------------------------------------------
  // Sorting and filtering

  function byName(a, b) {
    return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
  }

  function resort(kind) {
    var key = kind.sorts[kind.sort];
    var tiles = Array.from(kind.tiles.values());
    tiles.sort(key ? function (a, b) { return key(b.values) - key(a.values) || byName(a, b); } : byName);
    var current = kind.container.children;
    var same = tiles.length === current.length && tiles.every(function (t, i) { return current[i] === t.node; });
    if (!same) tiles.forEach(function (t) { kind.container.appendChild(t.node); });
  }

  function resortAll() {
    resortPending = false;
    Object.keys(kinds).forEach(function (type) { resort(kinds[type]); });
  }

  function scheduleResort() {
    if (resortPending) return;
    resortPending = true;
    window.setTimeout(resortAll, 0);
  }

  function sortControls(navId, kind) {
    var nav = document.getElementById(navId);
    nav.addEventListener('click', function (event) {
      var button = event.target.closest('button[data-sort]');
      if (!button) return;
      kind.sort = button.dataset.sort;
      nav.querySelectorAll('button').forEach(function (b) {
        b.setAttribute('aria-pressed', String(b === button));
      });
      resort(kind);
    });
  }

  function applyFilter(tile) {
    tile.node.hidden = filterText !== '' && tile.name.toLowerCase().indexOf(filterText) < 0;
  }

  // ---------------------------------------------------------------------------------------
  // Admin buttons

  function adminButtons(name) {
    var box = el('div', 'admin');
    [['force-open', 'Force open'], ['force-close', 'Force close'], ['reset', 'Reset']].forEach(function (a) {
      var button = el('button', null, a[1]);
      button.type = 'button';
      button.dataset.action = a[0];
      button.addEventListener('click', function () { circuitAction(name, a[0], status); });
      box.appendChild(button);
    });
    var status = el('span', 'admin-status', '');
    status.setAttribute('role', 'status');
    box.appendChild(status);
    return box;
  }

  function adminToken() {
    var token = window.sessionStorage.getItem(TOKEN_KEY);
    if (token) return token;
    token = window.prompt('Admin token for the breaker buttons (kept for this browser tab only):');
    token = token && token.trim();
    if (token) window.sessionStorage.setItem(TOKEN_KEY, token);
    return token || null;
  }

  function circuitAction(name, action, status) {
    if (action === 'force-open' && !window.confirm('Force the circuit of ' + name + ' open? Its calls are short-circuited until the sleep window ends.')) {
      return;
    }
    var headers = {};
    if (adminMode === 'token') {
      var token = adminToken();
      if (!token) return;
      headers.Authorization = 'Bearer ' + token;
    }
    status.textContent = action + '...';
    status.dataset.status = '';
    fetch(CIRCUIT_URL + encodeURIComponent(name) + '/' + action, { method: 'POST', headers: headers, cache: 'no-store' })
      .then(function (response) {
        return response.json().catch(function () { return {}; }).then(function (body) {
          status.dataset.status = String(response.status);
          if (response.ok) {
            status.textContent = action + ': ' + String(body.status || 'done').toLowerCase().replace('_', '-');
            return;
          }
          if (response.status === 401) window.sessionStorage.removeItem(TOKEN_KEY);
          status.textContent = action + ' refused (' + response.status + ')' + (body.error ? ': ' + body.error : '');
        });
      })
      .catch(function (err) {
        status.dataset.status = 'error';
        status.textContent = action + ' failed: ' + err.message;
      });
  }

  function loadInfo() {
    fetch(INFO_URL, { cache: 'no-store' })
      .then(function (response) { return response.ok ? response.json() : { admin: null }; })
      .then(function (info) {
        adminMode = info.admin === 'loopback' || info.admin === 'token' ? info.admin : null;
        // The buttons act on this instance's breakers only: off on another stream (a
        // cluster's), where a tile is not this instance's.
        var elsewhere = adminMode && stream.custom;
        if (elsewhere) adminMode = null;
        document.body.dataset.admin = adminMode || 'off';
        document.getElementById('admin-mode').textContent = adminMode
          ? 'breaker buttons on (' + (adminMode === 'token' ? 'token' : 'loopback only') + ')'
          : elsewhere ? 'breaker buttons off (another stream)' : '';
      })
      .catch(function () { document.body.dataset.admin = 'off'; });
  }

  // ---------------------------------------------------------------------------------------
  // The stream

  // The stream the page reads: STREAM_URL, or `?stream=` when it names a URL of the page's
  // own origin (a path such as /turbine.stream?cluster=demo, or relative to the page). Any
  // other origin is refused: the page connects to the stream itself, and is no proxy.
  // { url, custom } or { refused: the reason }.
  function chosenStream() {
    var own = new URL(STREAM_URL, window.location.href);
    var given = new URLSearchParams(window.location.search).get('stream');
    if (given === null || given.trim() === '') return { url: STREAM_URL, custom: false };
    var url;
    try {
      url = new URL(given.trim(), window.location.href);
    } catch (err) {
      return { refused: 'Not a URL: ' + given };
    }
    if (url.origin !== window.location.origin) {
      return { refused: 'Refused stream ' + given + ': this page reads streams of its own origin only (' + window.location.origin + '); give a path such as /turbine.stream?cluster=NAME.' };
    }
    var path = url.pathname + url.search;
    return { url: path, custom: path !== own.pathname + own.search };
  }

  function setConnection(state, text) {
    var node = document.getElementById('connection');
    node.dataset.state = state;
    node.textContent = text;
    // Tiles are dimmed while the stream is not live: their numbers are the last ones read.
    document.body.dataset.stream = state === 'live' ? 'live' : 'stale';
  }

  // Why the stream was refused: EventSource does not say, so ask once more with fetch and
  // read the server's answer (e.g. 404 "unknown cluster `x`; clusters: demo", or 503
  // "MaxConcurrentConnections reached: 5"); then try again after RETRY_AFTER_MS.
  function explainRefusal() {
    var retry = '; retrying in ' + RETRY_AFTER_MS / 1000 + ' s';
    var abort = new AbortController();
    window.fetch(stream.url, { signal: abort.signal, cache: 'no-store' })
      .then(function (response) {
        if (response.ok) {
          abort.abort(); // a stream again: the retry reads it
          setConnection('closed', 'stream ended' + retry);
          return;
        }
        return response.text().then(function (text) {
          setConnection('closed', 'stream refused: ' + response.status + ' ' +
            text.slice(0, 200) + retry);
        });
      })
      .catch(function () { setConnection('closed', 'stream unreachable' + retry); });
  }

  function connect() {
    setConnection('connecting', 'connecting');
    var source = new EventSource(stream.url);
    source.addEventListener('open', function () { setConnection('live', 'live'); });
    source.addEventListener('message', onMessage);
    source.addEventListener('error', function () {
      if (source.readyState === EventSource.CLOSED) {
        // Refused (e.g. 503 when the stream has all the clients it takes): say why, try
        // again later.
        setConnection('closed', 'stream refused; retrying in ' + RETRY_AFTER_MS / 1000 + ' s');
        explainRefusal();
        window.setTimeout(connect, RETRY_AFTER_MS);
      } else {
        setConnection('reconnecting', 'reconnecting');
      }
    });
  }

  function start() {
    sortControls('command-sort', kinds.HystrixCommand);
    sortControls('pool-sort', kinds.HystrixThreadPool);
    document.getElementById('filter').addEventListener('input', function (event) {
      filterText = event.target.value.trim().toLowerCase();
      Object.keys(kinds).forEach(function (type) { kinds[type].tiles.forEach(applyFilter); });
    });
    var name = document.getElementById('stream-name');
    if (stream.refused) {
      // Visible, and nothing is read.
      var refused = document.getElementById('stream-refused');
      refused.textContent = stream.refused;
      refused.hidden = false;
      document.body.dataset.admin = 'off';
      setConnection('refused', 'stream refused');
      return;
    }
    if (stream.custom) {
      name.textContent = stream.url;
      name.hidden = false;
      document.title = 'Hystrix dashboard: ' + stream.url;
    }
    loadInfo();
    connect();
    window.setInterval(resortAll, RESORT_EVERY_MS);
  }

  start();
})();
