/* The page of a basis comparison (actkit bases): the table of every basis's scores with their
   intervals, the verdicts, each basis's score distributions as histograms, and each basis's best
   and worst units drawn by the units page's own cards. units.js is loaded after this script: the
   page it hands to actkit.start is kept here and drawn once per basis, on that basis's units.
   Every name, token and path is shown as text. */
(function () {
  var start = actkit.start, unitsPage = null;
  actkit.start = function (draw) { unitsPage = draw; };     /* units.js's page, drawn per basis below */
  start(function (data, main) {
    actkit.start = start;
    var A = actkit, el = A.el, fmt = A.fmt;
    var R = data.report || {}, bases = data.bases || [], split = data.split || {};
    var SCORES = ["token_purity", "token_r2", "context_r2", "label_auroc"];
    function ci(s) {
      if (!s || !A.isNum(s.value)) return "";
      return fmt(s.value, 2) + (A.isNum(s.ci_low) ? " [" + fmt(s.ci_low, 2) + ", " + fmt(s.ci_high, 2) + "]" : "");
    }

    /* ---------------------------------------------------------------- about */
    var about = A.section("Comparison", "about");
    var facts = {store: R.store, layer: R.layer, rows: R.n_rows, samples: R.n_samples, "top rows per unit (k)": R.k,
                 "resamples of input samples": R.bootstrap, confidence: R.confidence, interval: R.interval,
                 "held-out share of input samples": split.eval_fraction, "fit rows": split.fit_rows,
                 "held-out rows": split.heldout_rows, key: split.key, labels: R.labels ? R.labels.length : "none"};
    about.appendChild(A.table([{key: "key", label: "what"}, {key: "value", label: ""}],
      Object.keys(facts).map(function (k) { return {key: k, value: facts[k]}; })));
    main.appendChild(about);

    /* ---------------------------------------------------------------- the table */
    var table = A.section("Scores (median over units, with " + fmt(100 * (R.confidence || 0), 0) + "% interval)", "scores");
    var cols = [{key: "name", label: "basis"}, {key: "n_units", label: "units"}];
    SCORES.forEach(function (s) {
      if (!bases.some(function (b) { return b.scores && b.scores[s]; })) return;
      cols.push({key: s, label: s + " median", value: function (b) { var m = b.scores[s] && b.scores[s].median; return m ? m.value : null; },
                 format: function (b) { return ci(b.scores[s] && b.scores[s].median); }});
      cols.push({key: s + "_share", label: "share \u2265 " + fmt((R.thresholds || {})[s], 2),
                 value: function (b) { var m = b.scores[s] && b.scores[s].share; return m ? m.value : null; },
                 format: function (b) { return ci(b.scores[s] && b.scores[s].share); }});
    });
    if (R.labels) cols.push({key: "own", label: "labels with a unit of their own",
                             value: function (b) { return b.labels ? b.labels.count : null; },
                             format: function (b) { return b.labels ? b.labels.count + " of " + R.labels.length : ""; }});
    [1, 2, 5].forEach(function (k) {
      if (!bases.some(function (b) { return b.probing && b.probing[k]; })) return;
      cols.push({key: "probe" + k, label: "probe k=" + k, value: function (b) { return b.probing && b.probing[k] ? b.probing[k].accuracy : null; },
                 format: function (b) { var p = b.probing && b.probing[k]; return p ? ci({value: p.accuracy, ci_low: p.ci_low, ci_high: p.ci_high}) : ""; }});
    });
    table.appendChild(el("div", {cls: "scroll"}, A.table(cols, bases, {cls: "scores"})));
    var notes = A.notes(R.notes);
    if (notes) table.appendChild(notes);
    main.appendChild(table);

    /* ---------------------------------------------------------------- verdicts */
    var verdicts = A.section("Verdicts (a difference whose interval holds 0 is not resolved)", "verdicts");
    var pairs = [], byPair = {};                               /* one line per pair of bases, as the terminal prints them */
    (data.verdicts || []).forEach(function (v) {
      if (!byPair[v.pair]) { byPair[v.pair] = []; pairs.push(v.pair); }
      byPair[v.pair].push(v.text);
    });
    verdicts.appendChild(el("ul", {cls: "verdicts"}, pairs.map(function (p) { return el("li", {text: p + ": " + byPair[p].join("; ")}); })));
    main.appendChild(verdicts);

    /* ---------------------------------------------------------------- per basis */
    bases.forEach(function (b) {
      var s = A.section("Basis " + b.name + (b.control ? " (control)" : ""), "basis-" + b.name);
      s.appendChild(el("p", {cls: "muted", text: b.kind + " \u00b7 " + b.source + " \u00b7 " + b.n_units + " units"}));
      var row = el("div", {cls: "hists"});
      Object.keys(b.hist || {}).forEach(function (score) {
        var h = b.hist[score], summ = b.scores[score] || {};
        row.appendChild(el("figure", {cls: "hist"}, A.histogram(h.counts, h.edges, {width: 240, height: 80,
          title: b.name + ": " + score + " over " + summ.n_units + " units"}),
          el("figcaption", {text: score + ": median " + ci(summ.median) + ", mean " + fmt(summ.mean && summ.mean.value, 2) +
                                  ", 90th pct " + fmt(summ.p90 && summ.p90.value, 2)})));
      });
      s.appendChild(row);
      var holder = el("div", {cls: "basis-cards"});
      s.appendChild(holder);
      main.appendChild(s);
      if (unitsPage && b.cards && b.cards.units && b.cards.units.length) unitsPage(b.cards, holder);
    });
  });
})();
