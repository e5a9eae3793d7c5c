// metagen report: builds the page from the inline JSON model (this file's parts are joined,
// in the order metagen.report.html gives, inside one function). Every piece of data reaches the
// document as a text node or an attribute value (never parsed as markup), so model output is
// shown literally whatever it contains.
var DATA = JSON.parse(document.getElementById("report-data").textContent);
var SVGNS = "http://www.w3.org/2000/svg";

// -- run details: provenance and failures, collapsed below the results ----------------------
function renderRuns() {
  DATA.runs.forEach(function (run) {
    var dl = el("dl", {"class": "summary"});
    run.summary.forEach(function (pair) {
      append(dl, [el("dt", null, pair[0]), el("dd", null, pair[1])]);
    });
    var reasons = Object.keys(run.failures), failedSamples = 0;
    reasons.forEach(function (r) { failedSamples += run.failures[r]; });
    var failures = reasons.length
      ? table(["failure reason", "samples"], reasons.map(function (r) {
          return el("tr", null, [el("td", null, r), el("td", null, fmt(run.failures[r]))]);
        }), {"data-testid": "failures"})
      : el("p", {"class": "note", "data-testid": "failures"}, "No failed samples.");
    var failed = run.failed_items.length
      ? el("p", {"class": "note"}, "Failed items (" + run.failed_items.length + "): " +
           run.failed_items.slice(0, 20).join(", ") + (run.failed_items.length > 20 ? ", …" : ""))
      : null;
    var status = run.summary.filter(function (p) { return p[0] === "status"; })[0];
    var gist = [status ? status[1] : null, typeof run.task === "string" ? run.task : null,
                failedSamples ? failedSamples + " failed samples" : null,
                run.failed_items.length ? run.failed_items.length + " failed items" : null]
      .filter(function (x) { return x; }).join(" · ");
    mount("runs-body", el("details", {"class": "run", "data-run": run.id}, [
      el("summary", null, [el("h3", {title: run.path}, run.name),
                           el("span", {"class": "gist"}, gist)]),
      dl, failures, failed]));
  });
}

// -- limits ---------------------------------------------------------------------------------
function renderLimits() {
  var c = DATA.cuts, parts = [];
  if (c.items_without_detail) parts.push(c.items_without_detail + " items listed without" +
    " candidates or trees (at most " + DATA.limits.max_items + " per run and " +
    fmt(DATA.limits.max_detail_chars / 1e6, 0) + " million characters of detail per page)");
  if (c.candidates_hidden) parts.push(c.candidates_hidden + " candidates not shown (at most " +
    DATA.limits.max_candidates + " per item)");
  if (c.texts_cut) parts.push(c.texts_cut + " texts cut (at " + DATA.limits.max_text_chars +
    " characters; tree steps at " + DATA.limits.max_step_chars + ")");
  if (c.tree_nodes_hidden) parts.push(c.tree_nodes_hidden + " tree nodes not shown (at most " +
    DATA.limits.max_tree_nodes + " per tree)");
  var note = document.getElementById("limits-note");
  note.textContent = parts.length ? "This page is cut to stay small: " + parts.join("; ") + "."
                                  : "Everything in the runs is shown.";
  note.setAttribute("data-testid", parts.length ? "cut-note" : "full-note");
}

function renderAll() {
  renderLimits();
  renderResults();
  renderTables();
  renderItems();
  renderRuns();
}
