// metagen report: builds the page from the inline JSON model. Every piece of data reaches the
// document as a text node or an attribute value (never parsed as markup), so model output is
// shown literally whatever it contains.
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("report-data").textContent);
  var SVGNS = "http://www.w3.org/2000/svg";
  var COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b",
                "#e377c2", "#7f7f7f", "#bcbd22"];

  // -- element helpers --------------------------------------------------------------------
  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }
  function svg(tag, attrs, children) {
    var node = document.createElementNS(SVGNS, tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }
  function setAttrs(node, attrs) {
    Object.keys(attrs || {}).forEach(function (k) {
      if (attrs[k] !== null && attrs[k] !== undefined) node.setAttribute(k, String(attrs[k]));
    });
  }
  function append(node, children) {
    (Array.isArray(children) ? children : [children]).forEach(function (c) {
      if (c === null || c === undefined) return;
      node.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
    });
  }
  function fmt(x, digits) {
    if (typeof x !== "number") return "—";
    if (Math.abs(x) >= 1e5) return x.toExponential(2);
    if (Number.isInteger(x)) return String(x);
    return x.toFixed(digits === undefined ? 3 : digits);
  }
  function valueClass(v) {
    return typeof v !== "number" ? null : v >= 1 ? "good" : v <= 0 ? "bad" : "part";
  }
  function table(head, rows, attrs) {
    return el("table", attrs, [
      el("thead", null, el("tr", null, head.map(function (h) { return el("th", null, h); }))),
      el("tbody", null, rows)]);
  }
  function mount(id, nodes) { append(document.getElementById(id), nodes); }

  // -- runs: provenance and failures ------------------------------------------------------
  function renderRuns() {
    DATA.runs.forEach(function (run) {
      var dl = el("dl", {"class": "summary"});
      run.summary.forEach(function (pair) {
        append(dl, [el("dt", null, pair[0]), el("dd", null, pair[1])]);
      });
      var reasons = Object.keys(run.failures);
      var failures = reasons.length
        ? table(["failure reason", "samples"], reasons.map(function (r) {
            return el("tr", null, [el("td", null, r), el("td", null, fmt(run.failures[r]))]);
          }), {"data-testid": "failures"})
        : el("p", {"class": "note", "data-testid": "failures"}, "No failed samples.");
      var failed = run.failed_items.length
        ? el("p", {"class": "note"}, "Failed items (" + run.failed_items.length + "): " +
             run.failed_items.slice(0, 20).join(", ") + (run.failed_items.length > 20 ? ", …" : ""))
        : null;
      mount("runs-body", el("div", {"class": "run", "data-run": run.id}, [
        el("h3", {title: run.path}, run.name), dl, failures, failed]));
    });
  }

  // -- charts -----------------------------------------------------------------------------
  var AXES = [
    {key: "n", title: "accuracy against N", label: "N (samples, beams)"},
    {key: "tokens", title: "accuracy against generated tokens", label: "generated tokens per item"},
    {key: "flops", title: "accuracy against FLOPs", label: "FLOPs per item"}];

  function allSeries() {
    var out = [];
    DATA.runs.forEach(function (run) {
      run.curves.forEach(function (curve) {
        out.push({run: run, curve: curve, color: COLORS[out.length % COLORS.length],
                  name: run.name + " · " + curve.strategy +
                        (curve.metric === "accuracy" ? "" : " (" + curve.metric + ")")});
      });
    });
    return out;
  }

  function renderCharts() {
    var series = allSeries();
    AXES.forEach(function (axis) {
      var box = el("div", {"class": "chart", "data-axis": axis.key}, el("h3", null, axis.title));
      var drawn = [], missing = [];
      series.forEach(function (s) {
        var pts = s.curve.points.filter(function (p) {
          return typeof p[axis.key] === "number" && typeof p.mean === "number";
        });
        if (pts.length) drawn.push({s: s, pts: pts}); else missing.push(s.name);
      });
      if (!drawn.length) {
        append(box, el("p", {"class": "not-recorded", "data-testid": "not-recorded"},
                       axis.label + ": not recorded for any run."));
      } else {
        append(box, chart(axis, drawn));
        append(box, el("ul", {"class": "legend"}, drawn.map(function (d) {
          return el("li", null, [el("span", {"class": "swatch",
                                             style: "background:" + d.s.color}), d.s.name]);
        })));
        if (missing.length) {
          append(box, el("p", {"class": "not-recorded", "data-testid": "not-recorded"},
                         axis.label + ": not recorded for " + missing.join("; ") + "."));
        }
      }
      mount("charts", box);
    });
  }

  function scale(values, lo, hi, log) {
    var f = log ? Math.log : function (v) { return v; };
    var a = Math.min.apply(null, values.map(f)), b = Math.max.apply(null, values.map(f));
    if (a === b) { a -= 1; b += 1; }
    var pad = (b - a) * 0.05;
    a -= pad; b += pad;
    return function (v) { return lo + (f(v) - a) / (b - a) * (hi - lo); };
  }

  function xTicks(xs, log) {
    var uniq = xs.filter(function (v, i) { return xs.indexOf(v) === i; }).sort(function (a, b) { return a - b; });
    if (uniq.length <= 8) return uniq;
    var lo = uniq[0], hi = uniq[uniq.length - 1], out = [];
    for (var i = 0; i < 5; i++) {
      out.push(log ? lo * Math.pow(hi / lo, i / 4) : lo + (hi - lo) * i / 4);
    }
    return out;
  }

  function chart(axis, drawn) {
    var W = 640, H = 340, L = 56, R = 16, T = 14, B = 44;
    var xs = [], ys = [];
    drawn.forEach(function (d) {
      d.pts.forEach(function (p) {
        var e = typeof p.stderr === "number" ? p.stderr : 0;
        xs.push(p[axis.key]); ys.push(p.mean - e, p.mean + e);
      });
    });
    var log = xs.every(function (v) { return v > 0; });
    var yLo = Math.min(0, Math.min.apply(null, ys)), yHi = Math.max(1, Math.max.apply(null, ys));
    var sx = scale(xs, L, W - R, log), sy = scale([yLo, yHi], H - B, T, false);
    var root = svg("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H,
                           role: "img", "aria-label": axis.title});
    var ticksY = [0, 0.25, 0.5, 0.75, 1];
    ticksY.forEach(function (t) {
      append(root, [svg("line", {"class": "grid", x1: L, x2: W - R, y1: sy(t), y2: sy(t)}),
                    svg("text", {x: L - 6, y: sy(t) + 4, "text-anchor": "end"}, fmt(t, 2))]);
    });
    var last = -Infinity;
    xTicks(xs, log).filter(function (t) {  // labels closer than 36 px would overlap
      if (sx(t) - last < 36) return false;
      last = sx(t);
      return true;
    }).forEach(function (t) {
      append(root, [svg("line", {"class": "grid", x1: sx(t), x2: sx(t), y1: T, y2: H - B}),
                    svg("text", {x: sx(t), y: H - B + 16, "text-anchor": "middle"},
                        fmt(t, t < 10 ? 1 : 0))]);
    });
    append(root, [
      svg("g", {"class": "axis"}, [svg("line", {x1: L, x2: W - R, y1: H - B, y2: H - B}),
                                   svg("line", {x1: L, x2: L, y1: T, y2: H - B})]),
      svg("text", {x: (L + W - R) / 2, y: H - 8, "text-anchor": "middle"},
          axis.label + (log ? " (log scale)" : "")),
      svg("text", {x: 14, y: (T + H - B) / 2, "text-anchor": "middle",
                   transform: "rotate(-90 14 " + (T + H - B) / 2 + ")"}, "accuracy")]);
    drawn.forEach(function (d) {
      var path = d.pts.map(function (p, i) {
        return (i ? "L" : "M") + sx(p[axis.key]).toFixed(1) + " " + sy(p.mean).toFixed(1);
      }).join(" ");
      var g = svg("g", {"class": "series", "data-run": d.s.run.id,
                        "data-strategy": d.s.curve.strategy, "data-metric": d.s.curve.metric});
      append(g, svg("path", {d: path, fill: "none", stroke: d.s.color, "stroke-width": 2,
                             "class": "curve", "data-points": d.pts.length}));
      d.pts.forEach(function (p) {
        var x = sx(p[axis.key]), e = typeof p.stderr === "number" ? p.stderr : 0;
        append(g, [
          svg("line", {"class": "errbar", x1: x, x2: x, y1: sy(p.mean - e), y2: sy(p.mean + e),
                       stroke: d.s.color}),
          svg("circle", {cx: x, cy: sy(p.mean), r: 3.5, fill: d.s.color}, svg("title", null,
              d.s.name + ": N=" + p.n + ", " + axis.label + " " + fmt(p[axis.key]) +
              ", accuracy " + fmt(p.mean) + " ± " + fmt(p.stderr) + " (" + p.items + " items)"))]);
      });
      append(root, g);
    });
    return root;
  }

  // -- difficulty and compute-optimal tables ----------------------------------------------
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

  // -- items ------------------------------------------------------------------------------
  function outcomeLabels(items) {
    var seen = [];
    items.forEach(function (it) {
      Object.keys(it.outcomes).forEach(function (k) { if (seen.indexOf(k) < 0) seen.push(k); });
    });
    return seen;
  }

  function renderItems() {
    DATA.runs.forEach(function (run) {
      var box = el("div", {"class": "run-items", "data-run": run.id}, el("h3", null, run.name));
      if (run.items_note) append(box, el("p", {"class": "not-recorded"}, run.items_note));
      if (!run.items.length) { mount("items-body", box); return; }
      var labels = outcomeLabels(run.items);
      var detail = el("div", {"class": "detail", "data-testid": "item-detail", hidden: ""});
      var rows = run.items.map(function (it) {
        var tr = el("tr", {"class": "item-row", "data-item": it.id, tabindex: 0},
          [el("td", null, it.id), el("td", null, it.difficulty === null ? "—" : it.difficulty)]
            .concat(labels.map(function (k) {
              var o = it.outcomes[k];
              return el("td", {"class": o ? valueClass(o.value) : null}, o ? fmt(o.value) : "—");
            })));
        function open() {
          Array.prototype.forEach.call(box.querySelectorAll("tr.selected"), function (r) {
            r.classList.remove("selected");
          });
          tr.classList.add("selected");
          showItem(detail, it);
        }
        tr.addEventListener("click", open);
        tr.addEventListener("keydown", function (ev) { if (ev.key === "Enter") open(); });
        return tr;
      });
      var head = ["item", "difficulty"].concat(labels.map(function (k) {
        var ns = run.items.map(function (it) { return it.outcomes[k] ? it.outcomes[k].n : 0; });
        return k + " @N=" + Math.max.apply(null, ns);
      }));
      append(box, [el("p", {"class": "note"}, "Click an item for its candidates" +
                      " and search trees. Values: correctness at the largest N (for subsampled" +
                      " strategies the fraction of size-N subsets answered right)."),
                   table(head, rows, {"data-testid": "items-table"}), detail]);
      mount("items-body", box);
    });
  }

  function showItem(box, it) {
    box.textContent = "";
    box.removeAttribute("hidden");
    box.setAttribute("data-item", it.id);
    append(box, el("h4", null, "Item " + it.id));
    if (!it.detail) {
      append(box, el("p", {"class": "not-recorded"}, "Details not included: a run carries" +
                     " candidates and trees for its first " + DATA.limits.max_items + " items," +
                     " the page for at most " + fmt(DATA.limits.max_detail_chars / 1e6, 0) +
                     " million characters of them."));
      return;
    }
    if (it.candidates.length) {
      append(box, el("h5", null, "Candidates"));
      if (it.candidates_total > it.candidates.length) {
        append(box, el("p", {"class": "note"}, "Showing the first " + it.candidates.length +
                       " of " + it.candidates_total + " candidates."));
      }
      append(box, table(["#", "answer", "correct", "tokens", "finish", "scores", "chosen", "text"],
        it.candidates.map(function (c) {
          return el("tr", {"class": "candidate", "data-index": c.index}, [
            el("td", null, fmt(c.index)), el("td", null, c.answer === null ? "—" : c.answer),
            el("td", {"class": c.correct ? "good" : "bad"}, c.correct ? "yes" : "no"),
            el("td", null, fmt(c.tokens)), el("td", null, c.finish_reason),
            el("td", null, Object.keys(c.scores).map(function (k) {
              return k + " " + fmt(c.scores[k]);
            }).join(", ") || "—"),
            el("td", null, c.chosen.map(function (h) {
              return h.by + ": " + h.times + "/" + h.of;
            }).join("; ") || "—"),
            el("td", null, textBlock(c.text, c.text_cut))]);
        }), {"data-testid": "candidates"}));
    }
    if (it.votes && it.votes.length) {
      append(box, [el("h5", null, "Votes per answer"),
        table(["answer", "votes", "correct", "summed scores", "candidates"],
          it.votes.map(function (v) {
            return el("tr", null, [el("td", null, v.answer), el("td", null, fmt(v.votes)),
              el("td", {"class": v.correct ? "good" : "bad"}, v.correct ? "yes" : "no"),
              el("td", null, Object.keys(v.scores).map(function (k) {
                return k + " " + fmt(v.scores[k]);
              }).join(", ") || "—"),
              el("td", null, v.members.join(", "))]);
          }), {"data-testid": "votes"})]);
    }
    it.searches.forEach(function (s) { append(box, searchView(s)); });
  }

  function textBlock(text, cut) {
    return el("pre", {"class": "text"}, cut
      ? [text, el("em", null, "\n… (cut at " + DATA.limits.max_text_chars + " characters)")]
      : text);
  }

  // -- search trees -----------------------------------------------------------------------
  function searchView(s) {
    var tree = el("ul", {"class": "tree"}, treeNode(s.tree, 0));
    function setAll(collapsed) {
      Array.prototype.forEach.call(tree.querySelectorAll("li.node.has-children"), function (li) {
        setCollapsed(li, collapsed);
      });
    }
    return el("div", {"class": "search", "data-testid": "search", "data-label": s.label,
                      "data-n": s.n}, [
      el("h5", null, s.label + " N=" + s.n + ": " + (s.value >= 1 ? "correct" : "wrong") +
         ", " + fmt(s.tokens) + " generated tokens"),
      textBlock(s.text, s.text_cut),
      s.hidden_nodes ? el("p", {"class": "note"}, s.hidden_nodes + " nodes not shown (trees" +
                          " are cut at " + DATA.limits.max_tree_nodes + " nodes).") : null,
      el("p", null, [
        button("expand all", function () { setAll(false); }, "expand-all"),
        " ", button("collapse all", function () { setAll(true); }, "collapse-all")]),
      tree]);
  }

  function button(text, onClick, testid) {
    var b = el("button", {type: "button", "data-testid": testid}, text);
    b.addEventListener("click", onClick);
    return b;
  }

  function setCollapsed(li, collapsed) {
    li.classList.toggle("collapsed", collapsed);
    var t = li.querySelector(":scope > button.toggle");
    if (t) {
      t.textContent = collapsed ? "▸" : "▾";
      t.setAttribute("aria-expanded", String(!collapsed));
    }
  }

  function treeNode(node, depth) {
    var kids = node.children || [];
    var cls = "node" + (kids.length || node.hidden_children ? " has-children" : "") +
              (node.terminal ? " terminal" : "") + (node.pruned ? " pruned" : "");
    var meta = typeof node.score === "number" ? ["score " + fmt(node.score)] : [];
    if (node.value !== null && node.value !== undefined) meta.push("value " + fmt(node.value));
    if (node.visits) meta.push("visits " + node.visits);
    if (node.terminal) meta.push("terminal");
    if (node.pruned) meta.push("pruned");
    var li = el("li", {"class": cls, "data-node-id": node.id});
    if (kids.length || node.hidden_children) {
      var t = button("", function () { setCollapsed(li, !li.classList.contains("collapsed")); },
                     "toggle");
      t.classList.add("toggle");
      append(li, t);
    } else {
      append(li, el("span", {"class": "leaf"}));
    }
    append(li, [el("span", {"class": "step"}, depth === 0 && !node.step ? "(prompt)" :
                   node.step.replace(/\n+$/, "") + (node.step_cut ? " …" : "")),
                el("span", {"class": "meta"}, meta.join(" · "))]);
    if (kids.length || node.hidden_children) {
      var ul = el("ul", null, kids.map(function (c) { return treeNode(c, depth + 1); }));
      if (node.hidden_children) {
        append(ul, el("li", {"class": "note"}, "… " + node.hidden_children +
                      " more children not shown"));
      }
      append(li, ul);
      setCollapsed(li, depth >= 1);
    }
    return li;
  }

  // -- limits -----------------------------------------------------------------------------
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

  renderLimits();
  renderRuns();
  renderCharts();
  renderTables();
  renderItems();
}());
