// Operations page: polls the console's counters (read from the API's /metrics) and draws each counter's rate per
// minute over the last 10 minutes as a small line (SVG, no library). Samples are kept in sessionStorage, so the
// charts go on while the operator moves between console pages.
(function () {
  "use strict";
  var root = document.getElementById("ops-charts");
  if (!root) { return; }
  var WINDOW_MS = 10 * 60 * 1000;
  var KEY = "guardrail-console-counters";
  var pollMs = Number(root.dataset.pollS || 5) * 1000;

  function load() {
    try { return JSON.parse(sessionStorage.getItem(KEY) || "[]"); } catch (e) { return []; }
  }

  function save(samples) {
    try { sessionStorage.setItem(KEY, JSON.stringify(samples)); } catch (e) { /* storage full or off: keep in memory */ }
  }

  var samples = load();

  function draw() {
    root.querySelectorAll("figure[data-counter]").forEach(function (figure) {
      var key = figure.dataset.counter;
      var line = figure.querySelector("polyline");
      var rate = figure.querySelector(".rate");
      var total = figure.querySelector("[data-total]");
      var last = samples[samples.length - 1];
      if (last) { total.textContent = String(Math.round(last[key])); }
      var rates = [];
      for (var i = 1; i < samples.length; i++) {
        var minutes = (samples[i].time - samples[i - 1].time) / 60;
        // A counter that went down: the service restarted; that interval counts from 0.
        var delta = samples[i][key] >= samples[i - 1][key] ? samples[i][key] - samples[i - 1][key] : samples[i][key];
        rates.push({ time: samples[i].time, value: minutes > 0 ? delta / minutes : 0 });
      }
      if (!rates.length) { return; }
      var end = samples[samples.length - 1].time;
      var top = Math.max.apply(null, rates.map(function (r) { return r.value; }).concat([1]));
      // The x axis spans the samples there are (up to the window): a chart opened a minute ago fills its width.
      var span = Math.max(end - rates[0].time, 1);
      var points = rates.map(function (r) {
        return [rates.length > 1 ? 300 - ((end - r.time) / span) * 300 : 300, 58 - (r.value / top) * 56];
      });
      line.setAttribute("points", points.map(function (p) { return p[0].toFixed(1) + "," + p[1].toFixed(1); }).join(" "));
      var dot = figure.querySelector(".dot");  // the latest rate, visible even before there is a line
      dot.setAttribute("cx", points[points.length - 1][0].toFixed(1));
      dot.setAttribute("cy", points[points.length - 1][1].toFixed(1));
      dot.setAttribute("r", "3");
      var now = rates[rates.length - 1].value;
      var sum = rates.reduce(function (s, r) { return s + r.value; }, 0);
      rate.textContent = now.toFixed(1) + " per minute now, " + (sum / rates.length).toFixed(1) +
        " on average over the last " + Math.max(1, Math.round((end - samples[0].time) / 60)) + " min (peak " +
        top.toFixed(1) + ").";
    });
  }

  async function poll() {
    try {
      var response = await fetch(root.dataset.url, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (response.ok) {
        var sample = await response.json();
        samples.push(sample);
        samples = samples.filter(function (s) { return sample.time - s.time <= WINDOW_MS / 1000; });
        save(samples);
        draw();
      }
    } catch (e) { /* the next poll tries again */ }
  }

  draw();
  poll();
  setInterval(poll, pollMs);
}());
