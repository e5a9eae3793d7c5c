// metagen report, one SVG chart: accuracy (with one-standard-error bars) against one quantity,
// one curve per series. Series are told apart by colour, dash and marker; the curves of one
// chart are moved apart sideways by a few pixels (DODGE) so that identical curves stay visible.
var COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b",
              "#e377c2", "#7f7f7f", "#bcbd22"];
var DASHES = ["", "7 4", "2 3", "10 3 2 3", "4 2 1 2"];
var MARKERS = ["circle", "square", "triangle", "diamond", "cross"];
var DODGE = 3, DODGE_SPAN = 18;  // pixels between neighbouring curves' points, at most in all
var CHAR_PX = 7, TICK_GAP = 8;  // a tick label's estimated width per character, and their gap

function scale(values, lo, hi, log) {
  var f = log ? Math.log : function (v) { return v; };
  var a = Math.min.apply(null, values.map(f)), b = Math.max.apply(null, values.map(f));
  if (a === b) { a -= 1; b += 1; }
  var pad = (b - a) * 0.05;
  a -= pad; b += pad;
  var to = function (v) { return lo + (f(v) - a) / (b - a) * (hi - lo); };
  to.domain = log ? [Math.exp(a), Math.exp(b)] : [a, b];
  return to;
}

// tick values in [lo, hi]: on a log axis powers of ten, else 1, 2 and 5 times them, when that
// gives three or more; otherwise (and on a linear axis) steps of 1, 2 or 5 times a power of ten
function niceTicks(lo, hi, log) {
  if (log) {
    var sets = [[1], [1, 2, 5]];
    for (var m = 0; m < sets.length; m++) {
      var out = [];
      for (var e = Math.floor(Math.log(lo) / Math.LN10); Math.pow(10, e) <= hi; e++) {
        sets[m].forEach(function (k) {
          var v = Number((k * Math.pow(10, e)).toPrecision(12));
          if (v >= lo && v <= hi) out.push(v);
        });
      }
      if (out.length >= 3) return out;
    }
  }
  var raw = (hi - lo) / 4, p = Math.pow(10, Math.floor(Math.log(raw) / Math.LN10));
  var step = [1, 2, 5, 10].map(function (k) { return k * p; })
    .filter(function (s) { return s >= raw; })[0];
  var ticks = [];
  for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
    if (v > 0 || !log) ticks.push(Number(v.toPrecision(12)));
  }
  return ticks;
}

function xTicks(axis, xs, sx, log) {
  var uniq = xs.filter(function (v, i) { return xs.indexOf(v) === i; })
    .sort(function (a, b) { return a - b; });
  if (axis.key === "n" && uniq.length <= 8) return uniq;
  return niceTicks(sx.domain[0], sx.domain[1], log);
}

// the ticks whose labels (estimated widths) do not run into the previous kept one
function spaced(ticks, sx) {
  var right = -Infinity;
  return ticks.filter(function (t) {
    var half = tickLabel(t).length * CHAR_PX / 2;
    if (sx(t) - half < right + TICK_GAP) return false;
    right = sx(t) + half;
    return true;
  });
}

// after the chart is on the page: hide any x tick label that still overlaps the one before it
function unclutter(root) {
  var right = -Infinity;
  Array.prototype.forEach.call(root.querySelectorAll("text.xtick"), function (t) {
    var box = t.getBoundingClientRect();
    if (box.left < right + 2) t.setAttribute("display", "none"); else right = box.right;
  });
}

function marker(shape, x, y, color, title) {
  var s = 4, attrs = {"class": "marker", fill: color, stroke: color};
  var node = shape === "square" ? svg("rect", Object.assign(attrs, {
      x: x - s + 0.5, y: y - s + 0.5, width: 2 * s - 1, height: 2 * s - 1}))
    : shape === "triangle" ? svg("path", Object.assign(attrs, {
      d: "M" + x + " " + (y - s - 1) + "L" + (x + s + 0.5) + " " + (y + s - 0.5) + "L" +
         (x - s - 0.5) + " " + (y + s - 0.5) + "Z"}))
    : shape === "diamond" ? svg("path", Object.assign(attrs, {
      d: "M" + x + " " + (y - s - 1) + "L" + (x + s + 1) + " " + y + "L" + x + " " +
         (y + s + 1) + "L" + (x - s - 1) + " " + y + "Z"}))
    : shape === "cross" ? svg("path", Object.assign(attrs, {
      fill: "none", "stroke-width": 2, d: "M" + (x - s) + " " + (y - s) + "L" + (x + s) + " " +
         (y + s) + "M" + (x - s) + " " + (y + s) + "L" + (x + s) + " " + (y - s)}))
    : svg("circle", Object.assign(attrs, {cx: x, cy: y, r: s}));
  if (title) append(node, svg("title", null, title));
  return node;
}

// a legend entry's sample: the series' line, dash and marker
function swatch(s) {
  return svg("svg", {width: 34, height: 12, "class": "swatch", "aria-hidden": "true"}, [
    svg("line", {x1: 1, x2: 33, y1: 6, y2: 6, stroke: s.color, "stroke-width": 2,
                 "stroke-dasharray": s.dash || null}),
    marker(s.marker, 17, 6, s.color)]);
}

function chart(axis, drawn) {
  var W = 520, H = 300, L = 52, R = 14, T = 12, B = 42;
  var xs = [], ys = [];
  drawn.forEach(function (d) {
    d.pts.forEach(function (p) {
      var e = typeof p.stderr === "number" ? p.stderr : 0;
      xs.push(p[axis.key]); ys.push(p.mean - e, p.mean + e);
    });
  });
  var log = xs.every(function (v) { return v > 0; });
  var yLo = Math.min(0, Math.min.apply(null, ys)), yHi = Math.max(1, Math.max.apply(null, ys));
  var sx = scale(xs, L + 8, W - R - 8, log), sy = scale([yLo, yHi], H - B, T, false);
  var root = svg("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H,
                         role: "img", "aria-label": axis.title});
  [0, 0.25, 0.5, 0.75, 1].forEach(function (t) {
    append(root, [svg("line", {"class": "grid", x1: L, x2: W - R, y1: sy(t), y2: sy(t)}),
                  svg("text", {"class": "ytick", x: L - 6, y: sy(t) + 4, "text-anchor": "end"},
                      fmt(t, 2))]);
  });
  spaced(xTicks(axis, xs, sx, log), sx).forEach(function (t) {
    append(root, [svg("line", {"class": "grid", x1: sx(t), x2: sx(t), y1: T, y2: H - B}),
                  svg("text", {"class": "xtick", x: sx(t), y: H - B + 16,
                               "text-anchor": "middle"}, tickLabel(t))]);
  });
  append(root, [
    svg("g", {"class": "axis"}, [svg("line", {x1: L, x2: W - R, y1: H - B, y2: H - B}),
                                 svg("line", {x1: L, x2: L, y1: T, y2: H - B})]),
    svg("text", {x: (L + W - R) / 2, y: H - 8, "text-anchor": "middle"},
        axis.label + (log ? " (log scale)" : "")),
    svg("text", {x: 14, y: (T + H - B) / 2, "text-anchor": "middle",
                 transform: "rotate(-90 14 " + (T + H - B) / 2 + ")"}, "accuracy")]);
  drawn.forEach(function (d, i) {
    var gap = Math.min(DODGE, DODGE_SPAN / Math.max(drawn.length - 1, 1));
    var shift = (i - (drawn.length - 1) / 2) * gap;
    var px = function (p) { return sx(p[axis.key]) + shift; };
    var path = d.pts.map(function (p, j) {
      return (j ? "L" : "M") + px(p).toFixed(1) + " " + sy(p.mean).toFixed(1);
    }).join(" ");
    var g = svg("g", {"class": "series", "data-run": d.s.run.id,
                      "data-strategy": d.s.curve.strategy, "data-metric": d.s.curve.metric});
    append(g, svg("path", {d: path, fill: "none", stroke: d.s.color, "stroke-width": 2,
                           "stroke-dasharray": d.s.dash || null, "class": "curve",
                           "data-points": d.pts.length}));
    d.pts.forEach(function (p) {
      var x = px(p), e = typeof p.stderr === "number" ? p.stderr : 0;
      append(g, [
        svg("line", {"class": "errbar", x1: x, x2: x, y1: sy(p.mean - e), y2: sy(p.mean + e),
                     stroke: d.s.color}),
        marker(d.s.marker, x, sy(p.mean), d.s.color,
               d.s.name + ": N=" + p.n + ", " + axis.label + " " + fmt(p[axis.key]) +
               ", accuracy " + fmt(p.mean) + " ± " + fmt(p.stderr) + " (" + p.items +
               " items)")]);
    });
    append(root, g);
  });
  return root;
}
