/* The page of a unit report (actkit units): an index of every unit, sortable by each score,
   searchable by the text of its examples and its logit tokens, with filters; one card per unit,
   drawn only when it comes into view (or is picked in the index), so that a report of
   thousands of units opens at once. Every token, label and path is shown as text. */
actkit.start(function (data, main) {
  var A = actkit, el = A.el, fmt = A.fmt;
  var S = data.strings || [], R = data.report || {}, units = data.units || [], inputs = data.inputs || {};
  var labels = R.labels || null, matches = data.matches || null;
  var threshold = labels && A.isNum(labels.threshold) ? labels.threshold : 0.9;
  var BATCH = 4;                     /* cards drawn at a time: about two screens of them */

  function show(token) {                 /* a tokenizer's piece, readable: its space and newline marks */
    return String(token).replace(/^[\u0120\u2581]/, " ").replace(/\u010a/g, "\u21b5");
  }
  function lines(text) {                 /* one line per example: line breaks shown as \u21b5 */
    return String(text).replace(/\r\n|[\n\r\u2028\u2029]/g, "\u21b5");
  }
  function visible(text) {               /* a token alone (the index, a space token): its whitespace seen */
    return lines(text).replace(/\t/g, "\u2192").replace(/[^\S\u21b5\u2192]/g, "\u2423");
  }
  function topToken(u) {                 /* the most frequent token of the unit's highest rows */
    var tt = u.top_tokens;
    if (!tt || !tt.tokens.length) return "";
    var first = tt.tokens[0];
    return (inputs.kind === "image" ? S[first[0]] : visible(show(S[first[0]]))) + " (" + first[1] + "/" + tt.rows + ")";
  }
  function shareText(u) {                /* "active 12.0%" or ">3 SD 0.9%", as the unit's data says */
    if (u.dead) return "never active";
    if (!A.isNum(u.share)) return "";
    return (u.share_shown === "beyond_3sd" ? ">3 SD " : "active ") + (100 * u.share).toFixed(1) + "%";
  }
  units.forEach(function (u) {
    var top = u.top[0];
    u.top_token = topToken(u);
    u.top_token_share = u.top_tokens ? u.top_tokens.share : null;
    u.top_value = top ? top.v : null;
    u.label_name = u.label ? u.label.name : null;
    u.label_auroc = u.label ? u.label.auroc : null;
    u.label_mi = u.label ? u.label.mutual_information : null;
    u.match_unit = u.match ? u.match.unit : null;
    u.match_corr = u.match ? u.match.corr : null;
    /* the share a card shows: of rows beyond 3 SD for a dense unit (active on almost every row), else of active rows */
    u.share = u.share_shown === "beyond_3sd" ? u.beyond_3sd : u.active_share;
    u.match_p = u.match ? u.match.p_value : null;
    u.is_selective = !!(u.label && A.isNum(u.label.auroc) && u.label.auroc >= threshold);
    u.is_shared = !!(u.match && u.match.shared);
  });

  /* the search: a unit matches when the text of one of its examples (a word over several
     tokens too), one of its top tokens, logit tokens or its label contains the query, case
     aside; each unit's text is gathered once, lower-cased, its parts apart (\u0000) */
  var unitText = null;
  function prepareSearch() {
    if (unitText) return;
    unitText = units.map(function (u) {
      var parts = [], ids = new Set();
      var take = function (e) {
        if (e.c) parts.push(e.c);
        if (e.t) e.t.forEach(function (i) { ids.add(i); });
      };
      u.top.forEach(take);
      u.bottom.forEach(take);
      u.bands.forEach(function (b) { b.examples.forEach(take); });
      if (u.logits) ["promoted", "suppressed"].forEach(function (side) {
        u.logits[side].forEach(function (t) { if (t[1] !== null) ids.add(t[1]); });
      });
      if (u.top_tokens) u.top_tokens.tokens.forEach(function (t) { if (t[0] !== null) ids.add(t[0]); });
      ids.forEach(function (i) { parts.push(show(S[i]), S[i]); });
      if (u.label_name !== null) parts.push(String(u.label_name));
      return parts.join("\u0000").toLowerCase();
    });
  }
  function matching(q) {
    prepareSearch();
    return unitText.map(function (t) { return t.indexOf(q) >= 0; });
  }

  /* ---------------------------------------------------------------- the summary */
  var about = A.section("Report", "about");
  var facts = {store: R.store, layer: R.layer, basis: R.basis ? R.basis.kind + " (" + R.basis.source + ")" : "",
               units: R.basis ? R.basis.n_units : units.length, shown: units.length, rows: R.n_rows,
               samples: R.n_samples, "examples per unit (k)": R.k, order: R.order, inputs: inputs.kind || "none"};
  if (labels) facts["labels with a unit of their own"] = labels.count + " of " + labels.names.length +
    " (AUROC \u2265 " + fmt(threshold, 2) + ")" + (labels.with_own_unit.length ? ": " + labels.with_own_unit.join(", ") : "");
  if (matches) facts["matched against"] = matches.other + " (layer " + (matches.layer_b || matches.layer) + "): " +
    matches.shared + " shared units, " + matches.permutations + " permutations, alpha " + matches.alpha;
  about.appendChild(A.table([{key: "key", label: "what"}, {key: "value", label: ""}],
    Object.keys(facts).map(function (k) { return {key: k, value: facts[k]}; })));
  main.appendChild(about);

  /* ---------------------------------------------------------------- the index */
  var index = A.section("Units", "index");
  var search = el("input", {attrs: {type: "search", id: "unit-search", placeholder: "search example text, top or logit tokens",
                                    "aria-label": "search units"}});
  var filters = {};
  function filter(key, text, count) {
    var box = el("input", {attrs: {type: "checkbox", id: "filter-" + key}});
    filters[key] = box;
    box.addEventListener("change", refresh);
    return el("label", {cls: "filter"}, box, " " + text + " (" + count + ")");
  }
  function count(f) { return units.filter(f).length; }
  var controls = el("p", {cls: "controls"}, search,
    filter("dead", "dead", count(function (u) { return u.dead; })),
    matches ? filter("shared", "shared", count(function (u) { return u.is_shared; })) : null,
    labels ? filter("selective", "label-selective", count(function (u) { return u.is_selective; })) : null,
    R.flipped && R.flipped.length ? filter("flipped", "flipped", count(function (u) { return u.flipped; })) : null);
  var counter = el("p", {cls: "muted", attrs: {id: "unit-count"}});
  var cols = [{key: "unit", label: "unit"}, {key: "rank", label: "rank"},
              {key: "top_token", label: "top token", cls: "tokcell", title: "the most frequent token (image: patch) of the unit's " +
                 (R.k_tokens || "") + " highest rows, with its count", value: function (u) { return u.top_token_share; }},
              {key: "top_value", label: "top", digits: 3}, {key: "mean", label: "mean", digits: 3},
              {key: "sd", label: "sd", digits: 3}, {key: "skewness", label: "skew", digits: 2},
              {key: "kurtosis", label: "kurt", digits: 2},
              {key: "share", label: "active / >3 SD", title: "share of rows active (non-zero), or, for a dense unit, beyond 3 SD of its mean",
               format: shareText, value: function (u) { return u.share; }}];
  if (labels) cols = cols.concat([{key: "label_name", label: "label"}, {key: "label_auroc", label: "AUROC", digits: 3},
                                  {key: "label_mi", label: "MI (bits)", digits: 3}]);
  if (matches) cols = cols.concat([{key: "match_unit", label: "match"},
                                   {key: "match_corr", label: "corr", digits: 3, title: "sorted by |corr|",
                                    value: function (u) { return A.isNum(u.match_corr) ? Math.abs(u.match_corr) : null; }},
                                   {key: "match_p", label: "p", digits: 3}]);
  var shownUnits = units, ready = false;
  var table = A.table(cols, units, {cls: "index", onRow: focus, onDraw: function (rows) { shownUnits = rows; if (ready) restartCards(); },
    descending: ["top_token", "top_value", "mean", "sd", "skewness", "kurtosis", "share", "label_auroc", "label_mi", "match_corr"]});
  index.appendChild(controls);
  index.appendChild(counter);
  index.appendChild(el("div", {cls: "scroll index-scroll"}, table));
  main.appendChild(index);

  var timer = null;
  search.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(refresh, 120); });
  function refresh() {
    var q = search.value.trim().toLowerCase();
    var found = q ? matching(q) : null;
    var rows = units.filter(function (u, i) {
      if (filters.dead && filters.dead.checked && !u.dead) return false;
      if (filters.shared && filters.shared.checked && !u.is_shared) return false;
      if (filters.selective && filters.selective.checked && !u.is_selective) return false;
      if (filters.flipped && filters.flipped.checked && !u.flipped) return false;
      return !found || found[i];
    });
    table.setRows(rows);
  }

  /* ---------------------------------------------------------------- the cards */
  var cards = A.section("Cards", "cards");
  var focusSlot = el("div", {attrs: {id: "card-focus"}});
  var list = el("div", {attrs: {id: "card-list"}});
  var sentinel = el("div", {cls: "sentinel muted", text: "more cards load as you scroll"});
  cards.appendChild(focusSlot);
  cards.appendChild(list);
  cards.appendChild(sentinel);
  main.appendChild(cards);
  var drawn = 0;
  function more() {
    var stop = Math.min(shownUnits.length, drawn + BATCH);
    for (; drawn < stop; drawn++) list.appendChild(cardOf(shownUnits[drawn]));
    sentinel.textContent = drawn < shownUnits.length ? "more cards load as you scroll (" + drawn + " of " + shownUnits.length + ")" :
      shownUnits.length + " cards";
  }
  var pending = null;
  function restartCards(now) {        /* the cards follow the index's order, drawn once it is shown */
    counter.textContent = "showing " + shownUnits.length + " of " + units.length + " units (click a row for its card)";
    clearTimeout(pending);
    var redraw = function () {
      list.textContent = "";
      drawn = 0;
      more();
    };
    if (now) redraw(); else pending = setTimeout(redraw, 0);
  }
  if ("IntersectionObserver" in window) {
    new IntersectionObserver(function (entries) {
      if (entries.some(function (e) { return e.isIntersecting; })) more();
    }, {rootMargin: "800px"}).observe(sentinel);
  }
  var cardsMade = {};                 /* each unit's card, drawn once */
  ready = true;
  restartCards(true);
  setTimeout(prepareSearch, 300);     /* the search's index, gathered once the page is shown */
  function cardOf(u) {
    if (!cardsMade[u.unit]) cardsMade[u.unit] = card(u);
    return cardsMade[u.unit];
  }
  function focus(u) {
    focusSlot.textContent = "";
    focusSlot.appendChild(el("h3", {text: "Picked in the index"}));
    focusSlot.appendChild(card(u));
    focusSlot.scrollIntoView();
  }

  /* a token's shade: orange for positive values, blue for negative, as deep as the value is
     large against the unit's own scale (its top value; its lowest for negatives) */
  function shade(node, v, scale) {
    if (!A.isNum(v) || v === 0) return;
    var s = v > 0 ? scale.pos : scale.neg, t = s > 0 ? Math.min(1, Math.abs(v) / s) : 0;
    if (t < 0.02) return;
    node.style.backgroundColor = v > 0 ? "rgba(255, 140, 0, " + (0.8 * t).toFixed(3) + ")" :
      "rgba(40, 110, 255, " + (0.6 * t).toFixed(3) + ")";
  }
  function pieces(e) {                   /* the context cut at its tokens: [text, token, token, ...] or [text] */
    var out = [], start = 0, k = e.k || [], q = e.q;
    for (var j = 0; j < k.length; j++) {
      var text = e.c.slice(start, start + k[j]), first = q ? q[j] : j;
      start += k[j];
      if (first < 0) { out.push([text]); continue; }
      var next = e.t.length;
      if (q) { for (var m = j + 1; m < q.length; m++) if (q[m] >= 0) { next = q[m]; break; } }
      else next = j + 1;
      var p = [text];
      for (var i = first; i < next; i++) p.push(i);
      out.push(p);
    }
    return out;
  }
  function actOf(e, i, scale) {          /* a token's activation: thousandths of the unit's scale */
    var a = (e.a || [])[i];
    return A.isNum(a) && A.isNum(scale.acts) ? a * scale.acts / 1000 : null;
  }
  function piece(e, p, scale) {          /* one piece of a context: text between tokens, or tokens */
    if (p.length === 1) return el("span", {cls: "gap", text: lines(p[0])});
    var ids = p.slice(1), best = null, title = [];
    ids.forEach(function (i) {
      var v = actOf(e, i, scale);
      title.push(S[e.t[i]] + " = " + (A.isNum(v) ? fmt(v, 3) : "(no row)"));
      if (A.isNum(v) && (best === null || Math.abs(v) > Math.abs(best))) best = v;
    });
    var text = p[0], cls = "tok" + (ids.indexOf(e.h) >= 0 ? " hi" : "");
    if (text === "") { text = show(S[e.t[ids[0]]]); cls += " sp"; }       /* a special token: its piece */
    else if (/^\s+$/.test(text)) { text = visible(text); cls += " ws"; }  /* a space token: seen */
    else text = lines(text);
    if ((e.x || []).indexOf(ids[0]) >= 0) cls += " sp";
    var node = el("span", {cls: cls, text: text, title: title.join("\n")});
    shade(node, best, scale);
    return node;
  }

  function example(e, scale) {
    var row = el("div", {cls: "ex"});
    var val = el("span", {cls: "val", text: fmt(e.v, 3), title: "sample " + e.s + ", position " + e.p + ", row " + e.r});
    val.style.setProperty("--w", Math.max(0, Math.min(100, scale.pos > 0 ? 100 * e.v / scale.pos : 0)).toFixed(1) + "%");
    row.appendChild(val);
    if (typeof e.c === "string") {
      var text = el("span", {cls: "ctx" + (e.h === null || e.h === undefined ? " whole" : "")});
      if (e.o > 0) text.appendChild(el("span", {cls: "more", text: "\u2026"}));
      pieces(e).forEach(function (p) { text.appendChild(piece(e, p, scale)); });
      row.appendChild(text);
    } else if (e.t) {
      var ctx = el("span", {cls: "ctx" + (e.h === null || e.h === undefined ? " whole" : "")});
      if (e.o > 0) ctx.appendChild(el("span", {cls: "more", text: "\u2026"}));
      var special = e.x || [];
      e.t.forEach(function (si, i) {
        ctx.appendChild(el("span", {cls: "tok" + (i === e.h ? " hi" : "") + (special.indexOf(i) >= 0 ? " sp" : ""),
                                    text: show(S[si]), title: S[si]}));
      });
      row.appendChild(ctx);
    } else if (e.img) {
      row.appendChild(picture(e));
    } else {
      row.appendChild(el("span", {cls: "muted", text: "sample " + e.s + (e.p >= 0 ? ", position " + e.p : " (pooled)")}));
    }
    return row;
  }

  function picture(e) {
    var uri = (inputs.images || {})[String(e.img.sample)];
    var box = el("span", {cls: "pic"});
    if (typeof uri !== "string" || !/^data:image\/png;base64,[A-Za-z0-9+\/=]+$/.test(uri)) {
      return el("span", {cls: "muted", text: "sample " + e.s + " (no picture)"});
    }
    var img = el("img", {attrs: {src: uri, alt: "sample " + e.s}});
    box.appendChild(img);
    if (e.img.box) {
      var mark = el("span", {cls: "patch", title: "patch " + (e.img.cell || []).join(", ")});
      box.appendChild(mark);
      var place = function () {
        var size = e.img.size || [img.naturalHeight || 1, img.naturalWidth || 1], H = size[0] || 1, W = size[1] || 1, b = e.img.box;
        mark.style.top = (100 * b[0] / H) + "%";
        mark.style.left = (100 * b[1] / W) + "%";
        mark.style.height = (100 * (b[2] - b[0]) / H) + "%";
        mark.style.width = (100 * (b[3] - b[1]) / W) + "%";
      };
      if (img.complete) place(); else img.addEventListener("load", place);
    }
    return box;
  }

  function thumb(e) {                    /* an image example: the picture, its patch boxed, its value */
    return el("figure", {cls: "thumb"}, picture(e), el("figcaption", {text: fmt(e.v, 3),
      title: "sample " + e.s + ", position " + e.p + ", row " + e.r}));
  }
  function examples(title, list, scale, hint) {
    if (!list || !list.length) return null;
    if (list[0].img) return el("div", {cls: "examples grid"}, el("h4", {text: title, title: hint || ""}),
                               el("div", {cls: "thumbs"}, list.map(thumb)));
    return el("div", {cls: "examples"}, el("h4", {text: title}), list.map(function (e) { return example(e, scale); }));
  }

  function tokenTable(u) {
    var tt = u.top_tokens;
    if (!tt || !tt.tokens.length) return null;
    var rows = tt.tokens.map(function (t) {
      return {token: t[0] === null ? "" : (inputs.kind === "image" ? S[t[0]] : visible(show(S[t[0]]))), count: t[1], mean: t[2]};
    });
    return el("div", {cls: "toptokens"},
      el("h4", {text: "Top tokens (" + tt.rows + " highest rows)"}),
      A.table([{key: "token", label: inputs.kind === "image" ? "patch" : "token", cls: "tokcell"},
               {key: "count", label: "rows"}, {key: "mean", label: "mean", digits: 3}], rows),
      tt.more > 0 ? el("p", {cls: "muted", text: "and " + tt.more + " more"}) : null);
  }

  function logitTable(u) {
    if (!u.logits) return null;
    var n = Math.max(u.logits.promoted.length, u.logits.suppressed.length), rows = [];
    for (var i = 0; i < n; i++) {
      var a = u.logits.promoted[i] || [], b = u.logits.suppressed[i] || [];
      rows.push({up: a.length ? (a[1] === null ? "#" + a[0] : show(S[a[1]])) : "", upv: a[2],
                 down: b.length ? (b[1] === null ? "#" + b[0] : show(S[b[1]])) : "", downv: b[2]});
    }
    return el("div", {cls: "logits"}, el("h4", {text: "Logit lens"}),
      A.table([{key: "up", label: "promoted", cls: "tokcell"}, {key: "upv", label: "logit", digits: 3},
               {key: "down", label: "suppressed", cls: "tokcell"}, {key: "downv", label: "logit", digits: 3}], rows));
  }

  function side(u) {
    var box = el("div", {cls: "side"});
    box.appendChild(el("h4", {text: "Activation histogram (all rows, log count)"}));
    box.appendChild(A.histogram(u.hist.counts, u.hist.edges, {log: true, width: inputs.kind === "image" ? 250 : 300, height: 90,
      title: "unit " + u.unit + ": activations over all rows"}));
    if (u.label) {
      box.appendChild(el("h4", {text: "Label selectivity"}));
      box.appendChild(el("p", {cls: "label" + (u.is_selective ? " selective" : "")},
        el("span", {cls: "name", text: u.label.name}),
        " AUROC " + fmt(u.label.auroc, 3) + ", MI " + fmt(u.label.mutual_information, 3) + " bits" +
        (u.is_selective ? " (selective)" : "")));
    }
    if (u.match) {
      var other = matches ? matches.other : "the other store";
      box.appendChild(el("h4", {text: "Matched unit"}));
      box.appendChild(el("div", {cls: "match" + (u.is_shared ? " shared" : "")},
        el("div", {cls: "pair"}, el("span", {cls: "unitbox", text: "unit " + u.unit}), " \u2194 ",
          el("span", {cls: "unitbox", text: "unit " + u.match.unit})),
        el("p", {text: "of " + other + (matches && matches.layer_b ? " (layer " + matches.layer_b + ")" : "")}),
        el("p", {text: "correlation " + fmt(u.match.corr, 3) +
                       (u.match.ci ? " (|corr| " + fmt(Math.abs(u.match.corr), 3) + ", interval " + fmt(u.match.ci[0], 3) +
                                     " to " + fmt(u.match.ci[1], 3) + ")" : "") + ", p = " + fmt(u.match.p_value, 3) +
                       (u.is_shared ? ": a shared unit" : ": not shared") +
                       (matches && matches.rule ? " (shared: " + matches.rule + ")" : "")})));
    }
    box.appendChild(tokenTable(u) || el("span"));
    box.appendChild(logitTable(u) || el("span"));
    return box;
  }

  function card(u) {
    var scale = {acts: u.acts_scale, pos: u.top.length && u.top[0].v > 0 ? u.top[0].v : 1,
                 neg: u.bottom.length && u.bottom[0].v < 0 ? -u.bottom[0].v : (u.top.length ? Math.abs(u.top[0].v) || 1 : 1)};
    var badges = [u.dead ? "dead" : null, u.flipped ? "flipped" : null, u.is_shared ? "shared" : null,
                  u.is_selective ? "label-selective" : null].filter(Boolean);
    var head = el("div", {cls: "cardhead"}, el("h3", {text: "Unit " + u.unit}),
      el("span", {cls: "muted", text: "rank " + u.rank + " \u00b7 mean " + fmt(u.mean, 3) + " \u00b7 sd " + fmt(u.sd, 3) +
        " \u00b7 skew " + fmt(u.skewness, 2) + " \u00b7 kurt " + fmt(u.kurtosis, 2) + " \u00b7 " +
        shareText(u)}),
      badges.map(function (b) { return el("span", {cls: "badge " + b, text: b}); }));
    var body = u.dead ? el("div", {cls: "main"}, el("p", {cls: "muted never", text: "never active: zero on every row"})) :
      el("div", {cls: "main" + (u.top.length && u.top[0].img ? " pictures" : "")},
      examples("Top examples", u.top, scale),
      u.bands.map(function (b) {
        var range = fmt(b.lo, 3) + " to " + fmt(b.hi, 3);
        if (inputs.kind === "image") {       /* short, so that two bands of thumbnails share a line */
          return examples("Band " + Math.round(100 * b.quantiles[0]) + "\u2013" + Math.round(100 * b.quantiles[1]) + " %",
                          b.examples, scale, "quantiles of the active rows; values " + range);
        }
        return examples("Band " + fmt(b.quantiles[0], 2) + "\u2013" + fmt(b.quantiles[1], 2) + " of active rows (" +
                        range + ")", b.examples, scale);
      }),
      examples("Lowest examples", u.bottom, scale));
    var node = el("article", {cls: "card", attrs: {"data-unit": u.unit}}, head,
                  el("div", {cls: "cardbody" + (inputs.kind === "image" ? " pictures" : "")}, body, side(u)));
    return node;
  }
});
