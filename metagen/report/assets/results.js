// metagen report, the results: per task (its runs grouped), the table of every strategy and N
// (accuracy, compute, wall time) and the charts of accuracy against N, tokens, FLOPs and wall
// time, one chart per task and quantity.
var AXES = [
  {key: "n", title: "accuracy against N", label: "N (samples, beams)"},
  {key: "tokens", title: "accuracy against generated tokens", label: "generated tokens per item"},
  {key: "flops", title: "accuracy against FLOPs", label: "FLOPs per item"},
  {key: "seconds", title: "accuracy against wall time", label: "wall time per item (s, mean)"}];

// [{task, runs}] in order of first appearance (a run without a task is its own group)
function tasks() {
  var out = [];
  DATA.runs.forEach(function (run) {
    var name = typeof run.task === "string" ? run.task : "(task not recorded) " + run.name;
    var group = out.filter(function (g) { return g.task === name; })[0];
    if (!group) { group = {task: name, runs: []}; out.push(group); }
    group.runs.push(run);
  });
  return out;
}

// the curves of a task's runs: colour per curve, dash and marker per run
function taskSeries(group) {
  var out = [];
  group.runs.forEach(function (run, r) {
    run.curves.forEach(function (curve) {
      out.push({run: run, curve: curve, color: COLORS[out.length % COLORS.length],
                dash: DASHES[r % DASHES.length], marker: MARKERS[r % MARKERS.length],
                name: (group.runs.length > 1 ? run.name + " · " : "") + curve.strategy +
                      (curve.metric === "accuracy" ? "" : " (" + curve.metric + ")")});
    });
  });
  return out;
}

function resultsTable(group, series) {
  var several = group.runs.length > 1;
  var head = (several ? ["run"] : []).concat(["strategy", "N", "accuracy", "items",
    "tokens / item", "FLOPs / item", "latency p50 (s)", "latency p90 (s)", "items / s"]);
  var rows = [];
  series.forEach(function (s) {
    s.curve.points.forEach(function (p) {
      rows.push(el("tr", {"data-run": s.run.id, "data-strategy": s.curve.strategy,
                          "data-metric": s.curve.metric, "data-n": p.n},
        (several ? [el("td", null, s.run.name)] : []).concat([
          el("td", null, [swatch(s), " ", s.curve.strategy +
                          (s.curve.metric === "accuracy" ? "" : " " + s.curve.metric)]),
          el("td", null, fmt(p.n)),
          el("td", {"class": valueClass(p.mean)}, fmt(p.mean) + " ± " + fmt(p.stderr)),
          el("td", null, fmt(p.items)), el("td", null, fmt(p.tokens, 1)),
          el("td", null, fmt(p.flops)), el("td", null, sig(p.p50)), el("td", null, sig(p.p90)),
          el("td", null, sig(p.throughput))]).map(function (td, i) {
            if (i >= (several ? 2 : 1)) td.classList.add("num");
            return td;
          })));
    });
  });
  return table(head, rows, {"data-testid": "results-table", "class": "results"});
}

function taskCharts(group, series) {
  var box = el("div", {"class": "charts"});
  AXES.forEach(function (axis) {
    var fig = el("figure", {"class": "chart", "data-axis": axis.key, "data-task": group.task},
                 el("figcaption", null, axis.title));
    var drawn = [], missing = [];
    series.forEach(function (s) {
      var pts = s.curve.points.filter(function (p) {
        return typeof p[axis.key] === "number" && typeof p.mean === "number";
      });
      if (pts.length) drawn.push({s: s, pts: pts}); else missing.push(s.name);
    });
    if (!drawn.length) {
      append(fig, el("p", {"class": "not-recorded", "data-testid": "not-recorded"},
                     axis.label + ": not recorded for any run of this task."));
    } else {
      append(fig, [chart(axis, drawn), el("ul", {"class": "legend", "data-testid": "legend"},
        drawn.map(function (d) { return el("li", null, [swatch(d.s), d.s.name]); }))]);
      if (missing.length) {
        append(fig, el("p", {"class": "not-recorded", "data-testid": "not-recorded"},
                       axis.label + ": not recorded for " + missing.join("; ") + "."));
      }
    }
    append(box, fig);
  });
  return box;
}

function renderResults() {
  tasks().forEach(function (group) {
    var series = taskSeries(group);
    mount("results-body", el("div", {"class": "task", "data-task": group.task}, [
      el("h3", null, "Task " + group.task + (group.runs.length > 1
        ? " (" + group.runs.length + " runs: " + group.runs.map(function (r) {
            return r.name; }).join(", ") + ")" : " (run " + group.runs[0].name + ")")),
      resultsTable(group, series), taskCharts(group, series)]));
  });
  Array.prototype.forEach.call(document.querySelectorAll(".chart svg[role=img]"), unclutter);
}
