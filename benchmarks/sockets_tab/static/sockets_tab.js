// The Sockets tab's chart (benchmarks/sockets_tab/plugin.py injects this into Locust's page).
// Locust's React UI draws the tab's table from /stats/requests; this adds, above it,
// TIME_WAIT (solid) and ESTABLISHED (dashed) per connection class over time, and a
// link to the sampler's CSV. Plain SVG, no library: the lab ships no CDN code.
(function () {
  "use strict";
  var COLOURS = { redis: "#d62728", upstream: "#1f77b4", front: "#2ca02c" };
  var W = 760, H = 260, L = 60, R = 160, T = 16, B = 40;  // R: room for "TIME_WAIT upstream"

  function tabTable() {
    var heads = document.querySelectorAll("table th");
    for (var i = 0; i < heads.length; i++) {
      if (heads[i].textContent.indexOf("TIME_WAIT / request") >= 0) {
        return heads[i].closest("table");
      }
    }
    return null;
  }

  function el(name, attrs, text) {
    var e = document.createElementNS("http://www.w3.org/2000/svg", name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function draw(svg, data) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var xs = data.elapsed_s || [];
    var keys = Object.keys(data).filter(function (k) { return k !== "elapsed_s"; });
    var ymax = 1;
    keys.forEach(function (k) {
      data[k].forEach(function (v) { if (v !== null && v > ymax) ymax = v; });
    });
    var x0 = xs.length ? xs[0] : 0, x1 = xs.length ? xs[xs.length - 1] : 1;
    if (x1 <= x0) x1 = x0 + 1;
    function X(v) { return L + (v - x0) / (x1 - x0) * (W - L - R); }
    function Y(v) { return H - B - v / ymax * (H - T - B); }
    svg.appendChild(el("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#888" }));
    svg.appendChild(el("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#888" }));
    [0, 0.5, 1].forEach(function (f) {
      svg.appendChild(el("text", { x: L - 6, y: Y(ymax * f) + 4, "text-anchor": "end",
        "font-size": 11, fill: "currentColor" }, Math.round(ymax * f)));
    });
    svg.appendChild(el("text", { x: L - 6, y: H - B + 16, "text-anchor": "end", "font-size": 11,
      fill: "currentColor" }, Math.round(x0) + " s"));
    svg.appendChild(el("text", { x: W - R, y: H - B + 16, "text-anchor": "end", "font-size": 11,
      fill: "currentColor" }, Math.round(x1) + " s"));
    svg.appendChild(el("text", { x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle",
      "font-size": 12, fill: "currentColor" }, "seconds since the capture began"));
    svg.appendChild(el("text", { x: 14, y: (T + H - B) / 2, "text-anchor": "middle",
      "font-size": 12, fill: "currentColor",
      transform: "rotate(-90 14 " + (T + H - B) / 2 + ")" }, "sockets"));
    keys.forEach(function (k, i) {
      var cls = k.replace(/^(tw|estab)_/, ""), estab = k.indexOf("estab_") === 0;
      var pts = [];
      xs.forEach(function (x, j) { if (data[k][j] !== null) pts.push(X(x) + "," + Y(data[k][j])); });
      var colour = COLOURS[cls] || "#9467bd";
      // equal series (stage 0: a Redis connection per request) would hide each other:
      // the ones drawn first are wider, so each stays visible around the next
      var same = keys.filter(function (o) { return (o.indexOf("estab_") === 0) === estab; });
      var width = 2 + 2.5 * (same.length - 1 - same.indexOf(k));
      svg.appendChild(el("polyline", { points: pts.join(" "), fill: "none", stroke: colour,
        "stroke-width": width, "stroke-opacity": 0.85, "stroke-dasharray": estab ? "6,4" : "" }));
      var ly = T + 14 + i * 16;   // the legend sits right of the plot, never over it
      svg.appendChild(el("line", { x1: W - R + 8, y1: ly - 4, x2: W - R + 30, y2: ly - 4,
        stroke: colour, "stroke-width": width, "stroke-dasharray": estab ? "6,4" : "" }));
      svg.appendChild(el("text", { x: W - R + 34, y: ly, "font-size": 11, fill: "currentColor" },
        (estab ? "ESTAB " : "TIME_WAIT ") + cls));
    });
  }

  function ensureChart(table) {
    var box = document.getElementById("sockets-chart");
    if (box) return box;
    box = document.createElement("div");
    box.id = "sockets-chart";
    box.style.margin = "8px 0 16px 0";
    var svg = el("svg", { id: "sockets-chart-svg", viewBox: "0 0 " + W + " " + H,
      width: "100%", style: "max-width:" + W + "px" });
    var link = document.createElement("a");
    link.href = "./sockets/csv";
    link.textContent = "Download sockets CSV (the sampler's, one row a second)";
    link.id = "sockets-csv-link";
    box.appendChild(svg);
    box.appendChild(document.createElement("br"));
    box.appendChild(link);
    var anchor = table.parentElement;
    anchor.parentElement.insertBefore(box, anchor);
    return box;
  }

  function tick() {
    var onTab = new URLSearchParams(window.location.search).get("tab") === "sockets";
    var table = onTab ? tabTable() : null;
    if (!table) return;
    var box = ensureChart(table);
    fetch("./sockets/series?last=300").then(function (r) { return r.json(); })
      .then(function (data) { draw(box.querySelector("svg"), data); })
      .catch(function () { /* the next tick tries again */ });
  }

  setInterval(tick, 2000);
})();
