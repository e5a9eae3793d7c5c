// metagen report, a search tree: nodes that expand and collapse, expand all / collapse all.
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
