// metagen report, per run: the difficulty breakdown and the compute-optimal table.
function meanCell(c) {
  return el("td", {"class": c ? valueClass(c.mean) : null},
            c ? fmt(c.mean) + " ± " + fmt(c.stderr) + " (" + fmt(c.items) + ")" : "—");
}
function renderTables() {
  DATA.runs.forEach(function (run) {
    var d = run.by_difficulty, o = run.compute_optimal;
    mount("difficulty-body", [el("h3", null, run.name),
      d && d.note ? el("p", {"class": "note"}, d.note) : null, d
      ? table(["strategy", "metric", "N"].concat(d.bins), d.rows.map(function (r) {
          return el("tr", null, [el("td", null, r.strategy), el("td", null, r.metric),
                                 el("td", null, fmt(r.n))].concat(r.cells.map(meanCell)));
        }), {"data-testid": "difficulty-table"})
      : el("p", {"class": "not-recorded"}, "No difficulty breakdown in this run.")]);
    mount("optimal-body", [el("h3", null, run.name),
      o && o.note ? el("p", {"class": "note"}, o.note) : null, o
      ? table(["difficulty bin"].concat(o.ns.map(function (n) { return "N=" + n; })),
          o.rows.map(function (r) {
            return el("tr", null, [el("td", null, r.bin)].concat(r.cells.map(function (c) {
              return el("td", null, !c ? "—" : c.strategy + " (" + fmt(c.accuracy) +
                        (typeof c.stderr === "number" ? " ± " + fmt(c.stderr) : "") + ")");
            })));
          }), {"data-testid": "optimal-table"})
      : el("p", {"class": "not-recorded"}, "No compute-optimal table in this run.")]);
  });
}
