// metagen report, per run: its items (outcome at the largest N), and an item's candidates, votes
// and searches when clicked.
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
          el("td", {"class": "chosen"}, c.chosen.length ? c.chosen.map(function (h) {
            return el("div", null, h.by + ": " + h.times + "/" + h.of);
          }) : "—"),
          el("td", {"class": "text"}, textBlock(c.text, c.text_cut))]);
      }), {"data-testid": "candidates", "class": "candidates"}));
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
