// The run page's charts: one uPlot chart per metric of the run's curve
// against step, wall time or CPU time; new points arrive over server-sent
// events and are drawn without reloading the page.
(function () {
  "use strict";
  var root = document.getElementById("charts");
  var runID = root.dataset.run, prefix = root.dataset.prefix;
  var points = [];
  var charts = [];
  var xKey = "step";
  var live = document.getElementById("live");
  var palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];

  function hintName(level) { return level < 0 ? "all" : "hint " + level; }

  // The charts the page draws, in order: each has a title and series, a
  // series being a label and a function from a point to a value (or null).
  function specs() {
    var levels = {}, metricKeys = {}, hintKeys = {}, bands = {}, poolLevels = {};
    points.forEach(function (p) {
      (p.held_out || []).forEach(function (h) { levels[h.hint_level] = true; });
      Object.keys(p.metrics || {}).forEach(function (k) {
        var m = /^pool_hint_(\d+)_(.+)$/.exec(k);
        if (k.indexOf("batch_hint_") === 0) hintKeys[k] = true;
        else if (m) poolLevels[m[1]] = true;
        else if (k.indexOf("pool_") === 0) bands[k.slice("pool_".length)] = true;
        else metricKeys[k] = true;
      });
    });
    var out = [];
    var lv = Object.keys(levels).map(Number).sort(function (a, b) { return a - b; });
    out.push({id: "held_out", title: "Held-out pass@1 per hint level", points: true, unit: true,
      series: lv.map(function (l) {
        return {label: hintName(l), get: function (p) {
          var h = (p.held_out || []).filter(function (h) { return h.hint_level === l; })[0];
          return h ? h.pass1 : null;
        }};
      })});
    var named = [["solve_rate", "Training solve rate", true], ["effective_fraction", "Effective-group fraction", true],
      ["loss", "Loss"], ["grad_norm", "Gradient norm"]];
    // The share of a step's policy tokens the trust region clipped or
    // masked (runs recorded before steps carried it have none).
    if (metricKeys.clip_fraction) named.push(["clip_fraction", "Tokens clipped or masked by the trust region (share)", false, true]);
    named.forEach(function (n) {
      delete metricKeys[n[0]];
      out.push({id: n[0], title: n[1], unit: !!n[2], share: !!n[3], series: [{label: n[0], get: metric(n[0])}]});
    });
    // How far the Sampler's log-probabilities were from the policy's on
    // the step's policy tokens (a quantized Sampler's mismatch).
    if (metricKeys.log_ratio_mean || metricKeys.log_ratio_max) {
      delete metricKeys.log_ratio_mean;
      delete metricKeys.log_ratio_max;
      out.push({id: "log_ratio", title: "|Δ log-prob| sampler − policy (nats)", series: [
        {label: "log_ratio_mean", get: metric("log_ratio_mean")}, {label: "log_ratio_max", get: metric("log_ratio_max")}]});
    }
    // The FrontierEstimator's pool after each step: by band, then the
    // active pool and its frontier band by hint level.
    var bandOrder = ["too_hard", "frontier", "too_easy", "retired_hopeless", "retired_mastered"];
    var bs = bandOrder.filter(function (b) { return bands[b]; }).concat(Object.keys(bands).filter(function (b) { return bandOrder.indexOf(b) < 0; }).sort());
    if (bs.length) {
      out.push({id: "pool_bands", title: "Pool by band (tasks)", series: bs.map(function (b) {
        return {label: b.replace("_", " "), get: metric("pool_" + b)};
      })});
    }
    var pl = Object.keys(poolLevels).map(Number).sort(function (a, b) { return a - b; });
    if (pl.length) {
      out.push({id: "pool_hints", title: "Active pool by hint level (tasks)", series: pl.map(function (l) {
        return {label: "hint " + l, get: function (p) {
          var n = null, prefix = "pool_hint_" + l + "_";
          Object.keys(p.metrics || {}).forEach(function (k) {
            if (k.indexOf(prefix) === 0) n = (n || 0) + p.metrics[k];
          });
          return n;
        }};
      })});
      out.push({id: "pool_frontier_hints", title: "Frontier band by hint level (tasks)", series: pl.map(function (l) {
        return {label: "hint " + l, get: metric("pool_hint_" + l + "_frontier")};
      })});
    }
    // Training episodes per minute of wall time at each step, from the
    // cumulative count of episodes a point records ("rollouts"), over at
    // least rateWindow seconds back: asynchronous steps finish in bursts
    // (two points a few milliseconds apart), so the rate between
    // neighbours alone would spike to tens of thousands.
    if (points.some(function (p) { return p.metrics && p.metrics.rollouts !== undefined; })) {
      out.push({id: "episodes_per_minute", title: "Training episodes per minute (over at least a minute)", series: [{label: "episodes/min", get: episodeRate}]});
    }
    // Where each step's time went (runs recorded before steps carried it
    // have none): the rollouts' and the Learner's wall seconds, and the
    // episodes' own generation and sandbox seconds, summed over episodes.
    var timeKeys = [["step_seconds_rollouts", "rollouts (wall)"], ["step_seconds_learning", "learning (wall)"],
      ["episode_seconds_generation", "generation (episode-s)"], ["episode_seconds_sandbox", "sandbox (episode-s)"]];
    if (timeKeys.some(function (k) { return metricKeys[k[0]]; })) {
      timeKeys.forEach(function (k) { delete metricKeys[k[0]]; });
      out.push({id: "step_time", title: "Where each step's time went (seconds)", series: timeKeys.map(function (k) {
        return {label: k[1], get: metric(k[0])};
      })});
    }
    out.push({id: "policy_version", title: "Policy version", series: [{label: "version", get: function (p) { return p.policy_version; }}]});
    var hk = Object.keys(hintKeys).sort();
    out.push({id: "hint_mix", title: "Batch hint mix (share of the step's tasks)", unit: true,
      series: hk.map(function (k) { return {label: "hint " + k.slice("batch_hint_".length), get: metric(k)}; })});
    Object.keys(metricKeys).sort().forEach(function (k) {
      out.push({id: k, title: k, series: [{label: k, get: metric(k)}]});
    });
    return out;
  }

  var rateWindow = 60;

  function rolloutsOf(p) { return p && p.metrics && p.metrics.rollouts !== undefined ? p.metrics.rollouts : null; }

  // episodeRate is a step's training episodes per minute: from the latest
  // earlier point at least rateWindow seconds before it (or the earliest
  // point with a count, when none is that far back).
  function episodeRate(p, i) {
    if (p.phase !== "step" || rolloutsOf(p) === null) return null;
    var q = null;
    for (var j = i - 1; j >= 0; j--) {
      if (rolloutsOf(points[j]) === null) continue;
      q = points[j];
      if (p.wall_seconds - q.wall_seconds >= rateWindow) break;
    }
    if (!q) return null;
    var dt = p.wall_seconds - q.wall_seconds;
    return dt > 0 ? 60 * (rolloutsOf(p) - rolloutsOf(q)) / dt : null;
  }

  function metric(k) {
    return function (p) {
      var v = (p.metrics || {})[k];
      return v === undefined ? null : v;
    };
  }

  function xOf(p) {
    if (xKey === "step") return p.step;
    if (xKey === "rollouts") return p.metrics ? p.metrics.rollouts : null;
    return p[xKey];
  }

  // The x-axis may count training episodes when every point records them
  // (runs recorded before points carried "rollouts" do not).
  function offerRollouts() {
    var sel = document.getElementById("xaxis");
    var all = points.length > 0 && points.every(function (p) { return p.metrics && p.metrics.rollouts !== undefined; });
    var opt = sel.querySelector('option[value="rollouts"]');
    if (all && !opt) {
      opt = document.createElement("option");
      opt.value = "rollouts";
      opt.textContent = "training episodes";
      sel.appendChild(opt);
    } else if (!all && opt) {
      if (xKey === "rollouts") { xKey = "step"; sel.value = "step"; }
      opt.remove();
    }
  }

  function dataFor(spec) {
    var d = [points.map(xOf)];
    spec.series.forEach(function (s) { d.push(points.map(function (p, i) { return s.get(p, i); })); });
    return d;
  }

  // drawn records on a chart's box how many values it plots (the tests
  // read it).
  // drawn records on a chart's box how many values it plots and the
  // largest (the tests read them).
  function drawn(box, d) {
    var n = 0, most = null;
    d.slice(1).forEach(function (ys) {
      ys.forEach(function (y) {
        if (y !== null && y !== undefined) { n++; most = most === null ? y : Math.max(most, y); }
      });
    });
    box.dataset.values = String(n);
    box.dataset.max = most === null ? "" : String(most);
  }

  function width() { return Math.max(320, Math.min(560, root.clientWidth / 2 - 24)); }

  function build() {
    offerRollouts();
    charts.forEach(function (c) { c.plot.destroy(); c.box.remove(); });
    charts = [];
    specs().forEach(function (spec) {
      var box = document.createElement("div");
      box.className = "chart";
      box.id = "chart-" + spec.id;
      root.appendChild(box);
      var series = [{label: xKey.replace("_", " ")}];
      spec.series.forEach(function (s, i) {
        series.push({label: s.label, stroke: palette[i % palette.length], width: 2, spanGaps: true,
          points: {show: spec.points || points.length < 60}});
      });
      var scales = {x: {time: false}};
      if (spec.unit) scales.y = {range: [0, 1]};
      // A share (small, often 0 for every step) from 0 up to its largest
      // value, at most 1: uPlot's own range for all-zero data is 0-100.
      if (spec.share) scales.y = {range: function (u, lo, hi) { return [0, hi > 0 ? Math.min(1, hi * 1.1) : 1]; }};
      var opts = {title: spec.title, width: width(), height: 220, series: series,
        scales: scales, legend: {live: true},
        // ymax: the top of the y-axis as drawn (the tests read it).
        hooks: {draw: [function (u) { box.dataset.ymax = String(u.scales.y.max); }]},
        axes: [xKey === "step" || xKey === "rollouts"
          ? {label: xKey === "step" ? "step" : "training episodes", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000]}
          : {label: xKey.replace("_", " ")}, {}]};
      var data = dataFor(spec);
      var plot = new uPlot(opts, data, box);
      drawn(box, data);
      charts.push({spec: spec, plot: plot, box: box, n: spec.series.length});
    });
    root.dataset.points = String(points.length);
    root.dataset.charts = String(charts.length);
  }

  // update redraws in place, or rebuilds when a point brought a new series
  // (a first evaluation, a new hint level, a new metric).
  function update() {
    var fresh = specs();
    var same = fresh.length === charts.length && fresh.every(function (s, i) {
      return s.id === charts[i].spec.id && s.series.length === charts[i].n;
    });
    if (!same) { build(); return; }
    offerRollouts();
    charts.forEach(function (c, i) {
      var data = dataFor(fresh[i]);
      c.spec = fresh[i];
      c.plot.setData(data);
      drawn(c.box, data);
    });
    root.dataset.points = String(points.length);
    document.getElementById("npoints").textContent = String(points.length);
  }

  function fmt(x) { return Math.round(x).toString(); }

  function link(text, path) {
    var a = document.createElement("a");
    a.href = prefix + path;
    a.textContent = text;
    return a;
  }

  function addRow(p) {
    var tbody = document.querySelector("#points tbody");
    var row = tbody.querySelector('tr[data-index="' + p.index + '"]');
    var cells = [p.index, p.phase, p.step, "v" + p.policy_version, fmt(p.wall_seconds), fmt(p.cpu_seconds),
      p.metrics && p.metrics.solve_rate !== undefined ? p.metrics.solve_rate.toFixed(3) : "-",
      (p.held_out || []).map(function (h) { return hintName(h.hint_level) + " pass@1 " + h.pass1.toFixed(3); }).join("; ") || "-", ""];
    var fresh = document.createElement("tr");
    fresh.dataset.index = String(p.index);
    cells.forEach(function (c) { var td = document.createElement("td"); td.textContent = String(c); fresh.appendChild(td); });
    var links = fresh.lastChild;
    if (p.phase === "step" && p.index > 0 && points[p.index - 1]) {
      // An asynchronous step trains on groups played up to
      // max_staleness_seen versions before the previous point's.
      var v = points[p.index - 1].policy_version, stale = Math.floor((p.metrics || {}).max_staleness_seen || 0);
      links.appendChild(link("training", "trajectories?run=" + encodeURIComponent(runID) + "&version=" + v +
        (stale > 0 ? "&min_version=" + Math.max(0, v - stale) : "")));
    }
    if ((p.held_out || []).length) {
      links.appendChild(document.createTextNode(" "));
      links.appendChild(link("held-out", "trajectories?run=" + encodeURIComponent(runID) + "&eval=" + encodeURIComponent(p.phase + "-" + p.step)));
    }
    if (row) {
      row.replaceWith(fresh);
    } else {
      tbody.insertBefore(fresh, tbody.firstChild);
    }
  }

  function connect() {
    var es = new EventSource(prefix + "run/events?id=" + encodeURIComponent(runID) + "&have=" + points.length);
    es.addEventListener("open", function () { live.textContent = "live"; live.className = "live on"; });
    es.addEventListener("point", function (e) {
      var p = JSON.parse(e.data);
      points[p.index] = p;
      addRow(p);
      update();
    });
    es.addEventListener("status", function (e) {
      var s = JSON.parse(e.data);
      var st = document.getElementById("run-status");
      st.textContent = s.status;
      st.className = "status " + s.status;
      document.getElementById("run-step").textContent = String(s.step);
    });
    es.addEventListener("error", function () { live.textContent = "reconnecting…"; live.className = "live"; });
  }

  document.getElementById("xaxis").addEventListener("change", function (e) { xKey = e.target.value; build(); });
  window.addEventListener("resize", function () { charts.forEach(function (c) { c.plot.setSize({width: width(), height: 220}); }); });

  fetch(prefix + "run/data?id=" + encodeURIComponent(runID)).then(function (r) {
    if (!r.ok) throw new Error("run data: HTTP " + r.status);
    return r.json();
  }).then(function (d) {
    points = d.points || [];
    build();
    connect();
  }).catch(function (err) { live.textContent = String(err); });
})();
