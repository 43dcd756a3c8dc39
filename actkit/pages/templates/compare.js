/* The page of `actkit compare`: per compared pair, every measure with its interval, p-value
   and note; the ICA source-correlation matrix; a layer map as a heat map. */
actkit.start(function (data, main) {
  var A = actkit, el = A.el;
  function interval(r) {
    return A.isNum(r.ci_low) && A.isNum(r.ci_high) ? "[" + A.fmt(r.ci_low, 3) + ", " + A.fmt(r.ci_high, 3) + "]" : "";
  }
  var columns = [
    {key: "measure", label: "measure"},
    {key: "kind", label: "kind", title: "error: held-out error / diam(B), lower is more alike; similarity: higher is more alike"},
    {key: "value", label: "value", value: function (r) { return r.value; },
     format: function (r) { return r.shown || A.fmt(r.value, 4); },
     title: "not identifiable\u2021: the halves of the ICA restarts disagree, so no digit would reproduce (as the table prints it)"},
    {key: "ci_low", label: "interval", format: interval, title: "bootstrap interval over the input samples"},
    {key: "p", label: "p", digits: 3, title: "permutation p-value (one-sided, more similar)"},
    {key: "null_mean", label: "null mean", digits: 3},
    {key: "note", label: "note", cls: "note"}
  ];
  var pairs = data.pairs || [];
  if (pairs.length > 1) {
    var names = [];
    pairs.forEach(function (p) { p.rows.forEach(function (r) { if (names.indexOf(r.measure) < 0) names.push(r.measure); }); });
    var rows = pairs.map(function (p) {
      var row = {pair: p.label};
      p.rows.forEach(function (r) { row[r.measure] = r.shown || r.value; });
      return row;
    });
    var s = A.section("All pairs", "summary");
    s.appendChild(el("div", {cls: "scroll"}, A.table([{key: "pair", label: "pair"}].concat(names.map(function (n) {
      return {key: n, label: n, digits: 3};
    })), rows)));
    main.appendChild(s);
  }
  pairs.forEach(function (p, i) {
    var s = A.section(p.label, "pair-" + i);
    s.appendChild(el("div", {cls: "scroll"}, A.table(columns, p.rows.map(function (r) {
      return Object.assign({}, r, {note: r.note || ""});
    }), {cls: "measures"})));
    var n = A.notes(p.notes);
    if (n) { s.appendChild(el("h3", {text: "Notes"})); s.appendChild(n); }
    if (p.source_correlation) {
      s.appendChild(el("h3", {text: "ICA sources: |correlation| on held-out rows (matched pairs on the diagonal)"}));
      s.appendChild(el("div", {cls: "scroll"}, A.heatmap(p.source_correlation.matrix, {vmin: 0, vmax: 1,
        title: "|correlation| of A's and B's ICA sources"})));
      s.appendChild(el("p", {cls: "muted", text: p.source_correlation.caption || ""}));
    }
    if (p.details) s.appendChild(A.details("Sizes, settings and timings", p.details));
    main.appendChild(s);
  });
  (data.maps || []).forEach(function (lm, m) {
    var s2 = A.section("Map: " + lm.measure, "map-" + m);
    s2.appendChild(el("div", {cls: "scroll"}, A.heatmap(lm.matrix, {rowLabels: lm.layers_a, colLabels: lm.layers_b,
      p: lm.p, values: true, title: lm.measure + ": layers of A (rows) x layers of B (columns)"})));
    s2.appendChild(el("p", {cls: "muted", text: lm.caption || ""}));
    var cells = [];
    lm.layers_a.forEach(function (a, i) {
      lm.layers_b.forEach(function (b, j) { cells.push({layer_a: a, layer_b: b, value: lm.matrix[i][j], p: lm.p ? lm.p[i][j] : null}); });
    });
    s2.appendChild(el("details", {}, el("summary", {text: "Every cell as a table"}),
      A.table([{key: "layer_a", label: "layer of A"}, {key: "layer_b", label: "layer of B"},
               {key: "value", label: lm.measure, digits: 4}, {key: "p", label: "p", digits: 3}], cells)));
    main.appendChild(s2);
  });
  (data.figures || []).forEach(function (f) {
    var s3 = A.section(f.title || "Figure");
    s3.appendChild(A.figure(f));
    main.appendChild(s3);
  });
  if (data.conventions) main.appendChild(A.details("Conventions (how each number is defined)", data.conventions));
});
