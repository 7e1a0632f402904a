"""The console's stylesheet and script, served as /static/console.css and
/static/console.js: plain CSS and JavaScript, no build step.

The script does three things, each driven by attributes on the page:

- ``data-poll="URL"`` (with ``data-every`` seconds, default 2): the element's content is
  replaced by what URL answers (an HTML fragment), again and again: the live lag, the
  overview's rates;
- ``data-tail="URL"``: Server-Sent Events from URL, each event's data an HTML table row
  put first in the element's table body (the live tail of a topic);
- a form with ``data-confirm="TEXT"`` asks before it is sent (deleting a topic).
"""

CSS = """
:root { --fg: #1d2330; --muted: #5f6b7e; --line: #d6dbe3; --bg: #f6f7f9; --accent: #2657a6;
  --bad: #a12828; --good: #1f6f3a; --hot: #b45309; --cold: #2657a6; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
  color: var(--fg); background: var(--bg); }
header { display: flex; flex-wrap: wrap; align-items: center; gap: 8px 24px;
  padding: 10px 24px; background: #17213a; color: #fff; }
header a { color: #dfe6f3; text-decoration: none; }
header .brand { font-weight: 700; font-size: 16px; color: #fff; }
header nav { display: flex; flex-wrap: wrap; gap: 4px 16px; }
header nav a.current { color: #fff; border-bottom: 2px solid #8fb3ff; }
header .who { margin-left: auto; display: flex; align-items: center; gap: 12px; }
header .who form { margin: 0; }
.mode { padding: 2px 8px; border-radius: 10px; font-size: 12px; }
.mode.admin { background: #7a1f1f; } .mode.read-only { background: #2d3d63; }
main { max-width: 1280px; margin: 0 auto; padding: 8px 24px 48px; }
h1 { font-size: 22px; margin: 16px 0 12px; word-break: break-all; }
h2 { font-size: 17px; margin: 28px 0 8px; }
a { color: var(--accent); }
table { border-collapse: collapse; width: 100%; background: #fff; margin: 6px 0 12px;
  border: 1px solid var(--line); }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid var(--line);
  vertical-align: top; }
th { background: #eef1f5; font-weight: 600; white-space: nowrap; }
td { overflow-wrap: anywhere; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.empty { color: var(--muted); text-align: center; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px;
  background: #fff; border: 1px solid var(--line); padding: 10px 14px; margin: 6px 0 12px; }
dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; overflow-wrap: anywhere; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(220px, 1fr)); gap: 12px; }
.card { background: #fff; border: 1px solid var(--line); padding: 10px 14px; }
.card .big { font-size: 22px; font-weight: 600; }
.muted { color: var(--muted); }
.message { padding: 10px 14px; margin: 10px 0; border: 1px solid; background: #fff; }
.message.error { border-color: var(--bad); color: var(--bad); background: #fdf1f1; }
.message.ok { border-color: var(--good); color: var(--good); background: #eff8f1; }
.message.note { border-color: var(--line); color: var(--muted); }
form.inline { display: flex; flex-wrap: wrap; align-items: flex-end; gap: 8px 12px;
  margin: 6px 0 12px; }
form.stacked { display: grid; gap: 8px; max-width: 640px; margin: 6px 0 12px; }
label { display: flex; flex-direction: column; gap: 2px; font-size: 12px; color: var(--muted); }
input, select, textarea { font: inherit; padding: 4px 6px; border: 1px solid #b7c0cd;
  border-radius: 3px; background: #fff; color: var(--fg); min-width: 0; }
textarea { width: 100%; min-height: 60px; font-family: ui-monospace, monospace; }
button { font: inherit; padding: 5px 12px; border: 1px solid var(--accent); border-radius: 3px;
  background: var(--accent); color: #fff; cursor: pointer; }
button.danger { background: var(--bad); border-color: var(--bad); }
header button { background: transparent; border-color: #8fa3c9; padding: 2px 10px; }
.tier { font-size: 11px; padding: 1px 6px; border-radius: 8px; color: #fff; white-space: nowrap; }
.tier.redis { background: var(--hot); } .tier.archive { background: var(--cold); }
.fmt { font-size: 11px; color: var(--muted); margin-right: 4px; }
pre.value { margin: 0; white-space: pre-wrap; word-break: break-all; max-height: 180px;
  overflow: auto; font: 12px/1.35 ui-monospace, monospace; }
pre.value.full { max-height: none; }
svg.spark { color: var(--accent); vertical-align: middle; }
.lag-zero { color: var(--good); } .lag-some { color: var(--hot); font-weight: 600; }
.toolbar { display: flex; flex-wrap: wrap; gap: 8px 16px; align-items: center; margin: 8px 0; }
td form.inline { margin: 0; }
table.records td:nth-child(-n+3) { width: 1%; white-space: nowrap; }
table.records td:nth-child(4) { width: 14%; }
.login p { margin-top: 0; }
.login { max-width: 360px; margin: 40px auto; background: #fff; border: 1px solid var(--line);
  padding: 20px; }
"""

JS = """
'use strict';
(function () {
  function poll(element) {
    var url = element.getAttribute('data-poll');
    var every = parseFloat(element.getAttribute('data-every') || '2') * 1000;
    function again() {
      fetch(url, {credentials: 'same-origin', headers: {'Accept': 'text/html'}})
        .then(function (answer) { return answer.ok ? answer.text() : null; })
        .then(function (text) { if (text !== null) { element.innerHTML = text; } })
        .catch(function () {})
        .then(function () { setTimeout(again, every); });
    }
    setTimeout(again, every);
  }
  function tail(element) {
    var body = element.querySelector('tbody');
    var status = document.getElementById('tail-status');
    var source = new EventSource(element.getAttribute('data-tail'));
    source.addEventListener('record', function (event) {
      var empty = body.querySelector('td.empty');
      if (empty) { empty.parentNode.remove(); }
      body.insertAdjacentHTML('afterbegin', event.data);
      while (body.rows.length > 200) { body.deleteRow(body.rows.length - 1); }
    });
    source.addEventListener('problem', function (event) {
      if (status) { status.textContent = event.data; }
    });
    source.onopen = function () { if (status) { status.textContent = 'following'; } };
    source.onerror = function () { if (status) { status.textContent = 'reconnecting'; } };
  }
  document.addEventListener('DOMContentLoaded', function () {
    document.querySelectorAll('[data-poll]').forEach(poll);
    document.querySelectorAll('[data-tail]').forEach(tail);
    document.querySelectorAll('form[data-confirm]').forEach(function (form) {
      form.addEventListener('submit', function (event) {
        if (!window.confirm(form.getAttribute('data-confirm'))) { event.preventDefault(); }
      });
    });
  });
})();
"""
