/* The page of `actkit evaluate`: Base / PCA / PCA+ICA / PCA+Rand, mean over tasks and per task. */
actkit.start(function (data, main) {
  var A = actkit, el = A.el;
  function withSd(m) {
    return function (r) {
      var sd = Math.max(A.isNum(r[m + "_sd"]) ? r[m + "_sd"] : 0, A.isNum(r[m + "_sd_rotations"]) ? r[m + "_sd_rotations"] : 0);
      return A.isNum(r[m]) ? A.fmt(r[m], 3) + (sd > 0 ? " \u00b1 " + A.fmt(sd, 3) : "") : "";
    };
  }
  var metricCols = data.metrics.map(function (m) {
    return {key: m, label: data.titles[m] || m, format: withSd(m), value: function (r) { return r[m]; },
            title: (data.definitions || {})[m] || m};
  });
  var mean = data.rows.filter(function (r) { return r.is_mean; });
  var s = A.section("Mean over tasks", "mean");
  s.appendChild(A.table([{key: "version", label: "version", format: function (r) { return data.labels[r.version] || r.version; }}].concat(metricCols), mean));
  s.appendChild(el("p", {text: data.verdict || ""}));
  A.add(s, A.notes(data.notes));
  main.appendChild(s);

  var t = A.section("Per task", "tasks");
  var search = el("input", {attrs: {type: "search", placeholder: "filter tasks by name", "aria-label": "filter tasks"}});
  var version = el("select", {attrs: {"aria-label": "version"}}, data.versions.map(function (v) {
    return el("option", {attrs: {value: v}, text: data.labels[v] || v});
  }));
  version.value = data.versions.indexOf("pca+ica") >= 0 ? "pca+ica" : data.versions[0];
  var holder = el("div", {cls: "scroll"});
  function draw() {
    var q = search.value.toLowerCase();
    var rows = data.rows.filter(function (r) {
      return !r.is_mean && r.version === version.value && String(r.task).toLowerCase().indexOf(q) >= 0;
    });
    holder.textContent = "";
    holder.appendChild(A.table([{key: "task", label: "task"}].concat(metricCols), rows, {descending: data.metrics}));
  }
  search.addEventListener("input", draw);
  version.addEventListener("change", draw);
  t.appendChild(el("p", {}, search, el("label", {cls: "filter", text: "version "}, version)));
  t.appendChild(holder);
  draw();
  main.appendChild(t);

  (data.figures || []).forEach(function (f) {
    var s3 = A.section(f.title || "Figure");
    s3.appendChild(A.figure(f));
    main.appendChild(s3);
  });
  if (data.settings) main.appendChild(A.details("Settings", data.settings));
  if (data.definitions) main.appendChild(A.details("Definitions", data.definitions));
});
