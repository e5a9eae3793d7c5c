// metagen report, page helpers: elements are built from data as text nodes and attribute values
// (never parsed as markup), numbers formatted for cells and axis ticks.
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
// an axis tick: at most three significant digits, large and small values as 1.2e9 / 5e-3
function tickLabel(v) {
  var a = Math.abs(v);
  if (v === 0) return "0";
  if (a >= 1e4 || a < 1e-2) {
    var e = Math.floor(Math.log(a) / Math.LN10), m = Math.round(v / Math.pow(10, e) * 10) / 10;
    if (Math.abs(m) >= 10) { m /= 10; e += 1; }
    return String(m) + "e" + e;
  }
  return String(Number(v.toPrecision(3)));
}
// three significant digits (seconds, rates): 4, 5.6, 0.584, 1.2e-4
function sig(x) {
  if (typeof x !== "number") return "—";
  if (x !== 0 && Math.abs(x) < 1e-3) return x.toExponential(1);
  return String(Number(x.toPrecision(3)));
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
