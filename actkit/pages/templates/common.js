/* actkit pages: the helpers every page shares. Plain JavaScript, no library, no network.
   Every string from the data goes onto the page as text (textContent, text nodes, SVG
   <title> text), never as markup: the page stays data, whatever the corpus holds. */
"use strict";
var actkit = (function () {
  var SVG = "http://www.w3.org/2000/svg";

  function el(tag, props) {
    var node = document.createElement(tag);
    props = props || {};
    if (props.cls) node.className = props.cls;
    if (props.text !== undefined && props.text !== null) node.textContent = String(props.text);
    if (props.title) node.title = String(props.title);
    if (props.attrs) for (var k in props.attrs) node.setAttribute(k, String(props.attrs[k]));
    for (var i = 2; i < arguments.length; i++) add(node, arguments[i]);
    return node;
  }

  function add(node, child) {
    if (child === null || child === undefined) return node;
    if (Array.isArray(child)) { child.forEach(function (c) { add(node, c); }); return node; }
    node.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
    return node;
  }

  function svg(tag, attrs, text) {
    var node = document.createElementNS(SVG, tag);
    for (var k in attrs || {}) node.setAttribute(k, String(attrs[k]));
    if (text !== undefined) node.textContent = String(text);
    return node;
  }

  function isNum(x) { return typeof x === "number" && isFinite(x); }

  function fmt(x, digits) {
    if (x === null || x === undefined) return "";
    if (typeof x === "number") {
      if (!isFinite(x)) return "";
      if (digits === undefined && Number.isInteger(x) && Math.abs(x) < 1e7) return String(x);
      var a = Math.abs(x);
      if (a !== 0 && (a < 1e-3 || a >= 1e5)) return x.toExponential(2);
      return x.toFixed(digits === undefined ? 3 : digits);
    }
    if (typeof x === "boolean") return x ? "yes" : "no";
    if (Array.isArray(x)) return x.map(function (v) { return fmt(v, digits); }).join(", ");
    return String(x);
  }

  function compare(a, b) {           /* numbers before text, empty cells last */
    var ea = a === null || a === undefined || a === "", eb = b === null || b === undefined || b === "";
    if (ea || eb) return ea === eb ? 0 : (ea ? 1 : -1);
    if (typeof a === "number" && typeof b === "number") return a - b;
    return String(a).localeCompare(String(b), undefined, {numeric: true});
  }

  /* A table of rows (objects) with a header that sorts by any column (click; again: reverse).
     columns: [{key, label, title, format(row) -> text, value(row) -> sort key, cls}] */
  function table(columns, rows, opts) {
    opts = opts || {};
    var state = {key: null, dir: 1};
    var body = el("tbody");
    var head = el("tr");
    var node = el("table", {cls: "data" + (opts.cls ? " " + opts.cls : "")}, el("thead", {}, head), body);
    function value(c, r) { return c.value ? c.value(r) : r[c.key]; }
    var made = typeof WeakMap === "function" ? new WeakMap() : null;   /* a row's <tr>, made once */
    function row(r) {
      var tr = made && made.get(r);
      if (tr) return tr;
      tr = el("tr");
      columns.forEach(function (c) {
        var text = c.format ? c.format(r) : fmt(r[c.key], c.digits);
        add(tr, el("td", {cls: c.cls || (typeof value(c, r) === "number" ? "num" : ""), text: text}));
      });
      if (opts.onRow) {
        tr.className = "clickable";
        tr.addEventListener("click", function () { opts.onRow(r); });
      }
      if (made && typeof r === "object") made.set(r, tr);
      return tr;
    }
    function draw() {
      var shown = rows.slice();
      if (state.key !== null) {
        var c = columns[state.key];
        shown.sort(function (a, b) { return state.dir * compare(value(c, a), value(c, b)); });
      }
      var frag = document.createDocumentFragment();
      shown.forEach(function (r) { frag.appendChild(row(r)); });
      body.textContent = "";
      body.appendChild(frag);
      if (opts.onDraw) opts.onDraw(shown);
    }
    node.setRows = function (r) { rows = r; draw(); };
    columns.forEach(function (c, i) {
      var th = el("th", {text: c.label || c.key, title: c.title || "sort by " + (c.label || c.key)});
      th.setAttribute("data-key", c.key);
      th.addEventListener("click", function () {
        state.dir = state.key === i ? -state.dir : (opts.descending && opts.descending.indexOf(c.key) >= 0 ? -1 : 1);
        state.key = i;
        Array.prototype.forEach.call(head.children, function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", state.dir > 0 ? "ascending" : "descending");
        draw();
      });
      head.appendChild(th);
    });
    draw();
    return node;
  }

  /* key: value pairs as a two-column table */
  function details(summary, obj) {
    var rows = Object.keys(obj).map(function (k) { return {key: k, value: obj[k]}; });
    return el("details", {}, el("summary", {text: summary}),
      table([{key: "key", label: "name"}, {key: "value", label: "value", format: function (r) { return fmt(r.value, 4); }}], rows));
  }

  var VIRIDIS = ["#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89", "#35b779", "#6ece58", "#b5de2b", "#fde725"];
  function color(t) {
    if (!isNum(t)) return "#dddddd";
    t = Math.max(0, Math.min(1, t));
    return VIRIDIS[Math.min(VIRIDIS.length - 1, Math.floor(t * VIRIDIS.length))];
  }

  /* matrix (rows x cols) as an SVG heat map; opts: rowLabels, colLabels, vmin, vmax, p (cells
     with p > 0.05 hatched and marked n.s.), xlabel, ylabel, values (print values in cells) */
  function heatmap(matrix, opts) {
    opts = opts || {};
    var nr = matrix.length, nc = nr ? matrix[0].length : 0;
    var flat = [].concat.apply([], matrix).filter(isNum);
    /* the colour scale spans the matrix's own range unless vmin / vmax are given */
    var lo = isNum(opts.vmin) ? opts.vmin : (flat.length ? Math.min.apply(null, flat) : 0);
    var hi = isNum(opts.vmax) ? opts.vmax : (flat.length ? Math.max.apply(null, flat) : 1);
    if (!(hi > lo)) hi = lo + 1e-12;
    var cell = Math.max(4, Math.min(44, Math.floor(560 / Math.max(nr, nc, 1))));
    var rl = opts.rowLabels || [], cl = opts.colLabels || [];
    var left = rl.length ? 8 + 6.5 * Math.min(28, Math.max.apply(null, rl.map(function (s) { return String(s).length; }))) : 30;
    var top = 8, bottom = cl.length ? 8 + 5 * Math.min(28, Math.max.apply(null, cl.map(function (s) { return String(s).length; }))) : 30;
    var w = left + nc * cell + 70, h = top + nr * cell + bottom + 16;
    var root = svg("svg", {width: w, height: h, viewBox: "0 0 " + w + " " + h, role: "img", "class": "heatmap"});
    if (opts.title) root.appendChild(svg("title", {}, opts.title));
    for (var i = 0; i < nr; i++) {
      for (var j = 0; j < nc; j++) {
        var v = matrix[i][j];
        var ns = opts.p && isNum(opts.p[i][j]) && opts.p[i][j] > 0.05;
        var r = svg("rect", {x: left + j * cell, y: top + i * cell, width: cell, height: cell,
                             fill: color((v - lo) / (hi - lo || 1)), "class": "cell" + (ns ? " ns" : "")});
        r.appendChild(svg("title", {}, (rl[i] !== undefined ? rl[i] : "row " + i) + " x " +
          (cl[j] !== undefined ? cl[j] : "column " + j) + ": " + fmt(v, 4) +
          (opts.p && isNum(opts.p[i][j]) ? " (p = " + fmt(opts.p[i][j], 3) + ")" : "")));
        root.appendChild(r);
        if (opts.values && cell >= 28 && isNum(v)) {
          root.appendChild(svg("text", {x: left + (j + 0.5) * cell, y: top + (i + 0.5) * cell + 3, "text-anchor": "middle",
            "class": "cellval", fill: (v - lo) / (hi - lo || 1) > 0.6 ? "#000" : "#fff"}, fmt(v, 2) + (ns ? "*" : "")));
        }
      }
    }
    var step = Math.max(1, Math.ceil(12 / cell));
    rl.forEach(function (s, i) {
      if (i % step === 0) root.appendChild(svg("text", {x: left - 4, y: top + (i + 0.5) * cell + 3, "text-anchor": "end", "class": "tick"}, s));
    });
    cl.forEach(function (s, j) {
      if (j % step !== 0) return;
      var x = left + (j + 0.5) * cell, y = top + nr * cell + 6;
      root.appendChild(svg("text", {x: x, y: y, transform: "rotate(40 " + x + " " + y + ")", "class": "tick"}, s));
    });
    var bar = left + nc * cell + 14;
    for (var k = 0; k < 20; k++) {
      root.appendChild(svg("rect", {x: bar, y: top + (19 - k) * (nr * cell / 20), width: 12, height: nr * cell / 20 + 0.5, fill: color(k / 19)}));
    }
    var digits = hi - lo < 0.05 ? 4 : (hi - lo < 0.5 ? 3 : 2);   /* the ends told apart */
    root.appendChild(svg("text", {x: bar + 16, y: top + 8, "class": "tick colorbar-hi"}, fmt(hi, digits)));
    root.appendChild(svg("text", {x: bar + 16, y: top + nr * cell, "class": "tick colorbar-lo"}, fmt(lo, digits)));
    return root;
  }

  /* counts over bins [edges[i], edges[i+1]) as an SVG bar chart */
  function histogram(counts, edges, opts) {
    opts = opts || {};
    var w = opts.width || 320, h = opts.height || 120, pad = 24;
    var max = Math.max.apply(null, counts.concat([1]));
    var root = svg("svg", {width: w, height: h + pad, viewBox: "0 0 " + w + " " + (h + pad), role: "img", "class": "histogram"});
    root.appendChild(svg("title", {}, opts.title || "histogram"));
    var bw = (w - 8) / Math.max(1, counts.length);
    counts.forEach(function (c, i) {
      var bh = opts.log ? (c > 0 ? h * Math.log(1 + c) / Math.log(1 + max) : 0) : h * c / max;
      var r = svg("rect", {x: 4 + i * bw, y: h - bh, width: Math.max(1, bw - 1), height: bh, "class": "bar"});
      r.appendChild(svg("title", {}, "[" + fmt(edges[i], 3) + ", " + fmt(edges[i + 1], 3) + "): " + c));
      root.appendChild(r);
    });
    root.appendChild(svg("text", {x: 4, y: h + 16, "class": "tick"}, fmt(edges[0], 3)));
    root.appendChild(svg("text", {x: w - 4, y: h + 16, "text-anchor": "end", "class": "tick"}, fmt(edges[edges.length - 1], 3)));
    return root;
  }

  /* a figure the page was given as a data: URI (PNG or SVG image); anything else is refused */
  function figure(fig) {
    var ok = typeof fig.src === "string" && /^data:image\/(png|svg\+xml);base64,[A-Za-z0-9+\/=]+$/.test(fig.src);
    return el("figure", {}, ok ? el("img", {attrs: {src: fig.src, alt: fig.title || "figure"}}) : el("p", {text: "(figure left out: not an image)"}),
      el("figcaption", {text: fig.caption || fig.title || ""}));
  }

  function section(title, id) {
    var s = el("section", {cls: "block"}, el("h2", {text: title}));
    if (id) s.id = id;
    return s;
  }

  function notes(list) {
    if (!list || !list.length) return null;
    return el("ul", {cls: "notes"}, list.map(function (n) { return el("li", {text: n}); }));
  }

  /* parse the page's data, show its title, run the page's own drawing */
  function start(draw) {
    function run() {
      var data = JSON.parse(document.getElementById("actkit-data").textContent);
      document.getElementById("page-title").textContent = data.title || "actkit";
      document.getElementById("page-subtitle").textContent = data.subtitle || "";
      var main = document.getElementById("page-main");
      main.textContent = "";
      draw(data, main);
      window.actkitReadyMs = performance.now();   /* time to interactive, for benchmarks/bench_pages.py */
      document.body.setAttribute("data-ready", "1");
    }
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", run);
    else run();
  }

  return {el: el, add: add, svg: svg, fmt: fmt, isNum: isNum, table: table, details: details, heatmap: heatmap,
          histogram: histogram, figure: figure, section: section, notes: notes, start: start, color: color};
})();
