// The frontier page's calibration plot: each bin's mean predicted solve
// rate against the observed one, for the posterior and the difficulty
// model alone, with the diagonal of perfect calibration.
(function () {
  "use strict";
  var box = document.getElementById("calibration");
  var d = JSON.parse(box.dataset.calib || "{}");
  var post = d.posterior || [], model = d.model || [];
  if (!post.length && !model.length) {
    box.textContent = "No outcome has been graded against a prediction yet.";
    box.className = "empty";
    return;
  }
  // uPlot wants one shared, sorted x: merge both sets' predicted values.
  var xs = post.map(function (b) { return b.predicted; }).concat(model.map(function (b) { return b.predicted; }), [0, 1]);
  xs = xs.filter(function (x, i) { return xs.indexOf(x) === i; }).sort(function (a, b) { return a - b; });
  function col(set) {
    return xs.map(function (x) {
      var b = set.filter(function (b) { return b.predicted === x; })[0];
      return b ? b.observed : null;
    });
  }
  var none = function () { return null; };
  var plot = new uPlot({title: "Calibration", width: 520, height: 360, scales: {x: {time: false, range: [0, 1]}, y: {range: [0, 1]}},
    axes: [{label: "predicted solve rate"}, {label: "observed solve rate"}],
    series: [{label: "predicted"},
      {label: "perfect", stroke: "#999", dash: [4, 4], spanGaps: true, points: {show: false}},
      {label: "posterior", stroke: "#1f77b4", paths: none, points: {show: true, size: 8, fill: "#1f77b4"}},
      {label: "model, first tries", stroke: "#d62728", paths: none, points: {show: true, size: 8, fill: "#d62728"}}]},
    [xs, xs.map(function (x) { return x === 0 || x === 1 ? x : null; }), col(post), col(model)], box);
  box.dataset.bins = String(post.length + model.length);
})();
