(function () {
  var data = JSON.parse(document.getElementById('dashboard-data').textContent);
  var SVG = 'http://www.w3.org/2000/svg';
  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function svgEl(tag, attrs, text) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function fmt(v) { return typeof v === 'number' ? (Math.abs(v) >= 1000 || Number.isInteger(v) ? String(Math.round(v)) : v.toPrecision(4)) : String(v); }
  function chart(name, points) {
    var W = 280, H = 140, L = 44, R = 8, T = 18, B = 22;
    var svg = svgEl('svg', {'class': 'chart', width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, 'data-series': name});
    svg.appendChild(svgEl('text', {x: L, y: 12, 'font-size': 11}, name));
    var xs = points.map(function (p) { return p[0]; }), ys = points.map(function (p) { return p[1]; });
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs), y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    if (x1 === x0) { x1 = x0 + 1; } if (y1 === y0) { y1 = y0 + 1; }
    function px(x) { return L + (x - x0) / (x1 - x0) * (W - L - R); }
    function py(y) { return H - B - (y - y0) / (y1 - y0) * (H - T - B); }
    svg.appendChild(svgEl('rect', {x: L, y: T, width: W - L - R, height: H - T - B, fill: 'none', stroke: '#ccc'}));
    svg.appendChild(svgEl('text', {x: L - 3, y: T + 8, 'font-size': 9, 'text-anchor': 'end'}, fmt(y1)));
    svg.appendChild(svgEl('text', {x: L - 3, y: H - B, 'font-size': 9, 'text-anchor': 'end'}, fmt(y0)));
    svg.appendChild(svgEl('text', {x: L, y: H - 6, 'font-size': 9}, 'step ' + fmt(x0)));
    svg.appendChild(svgEl('text', {x: W - R, y: H - 6, 'font-size': 9, 'text-anchor': 'end'}, fmt(x1)));
    svg.appendChild(svgEl('polyline', {fill: 'none', stroke: '#1f77b4', 'stroke-width': 1.5,
      points: points.map(function (p) { return px(p[0]).toFixed(1) + ',' + py(p[1]).toFixed(1); }).join(' ')}));
    points.forEach(function (p) { svg.appendChild(svgEl('circle', {cx: px(p[0]).toFixed(1), cy: py(p[1]).toFixed(1), r: 2, fill: '#1f77b4'})); });
    return svg;
  }
  function runSection(table, run) {
    var box = el('details', {'class': 'run', id: 'run-' + table.id + '-' + run.row + '-s' + run.seed, 'data-status': run.status});
    var summary = el('summary');
    summary.appendChild(el('strong', {}, run.row + ' s' + run.seed));
    summary.appendChild(document.createTextNode(' '));
    summary.appendChild(el('span', {'class': 'status-' + run.status}, run.status));
    var m = run.metrics;
    if (m.dev_bleu !== undefined) summary.appendChild(document.createTextNode(' \u00b7 dev BLEU ' + fmt(m.dev_bleu) + ', PPL ' + fmt(m.dev_ppl)));
    if (m.test_f1 !== undefined) summary.appendChild(document.createTextNode(' \u00b7 test F1 ' + fmt(m.test_f1) + ', dev F1 ' + fmt(m.dev_f1) + ', invalid ' + fmt(m.test_invalid)));
    summary.appendChild(el('span', {'class': 'muted'}, ' ' + run.run_id));
    box.appendChild(summary);
    var links = el('p');
    if (run.record) { links.appendChild(el('a', {href: run.record + '/metrics.json'}, 'record')); links.appendChild(document.createTextNode(' ')); }
    else { links.appendChild(el('span', {'class': 'muted'}, 'no published record (' + run.status + ')')); }
    if (run.wandb_url) { links.appendChild(el('a', {href: run.wandb_url, 'class': 'wandb'}, 'wandb run')); }
    else { links.appendChild(el('span', {'class': 'muted'}, ' \u00b7 no wandb link (not synced)')); }
    box.appendChild(links);
    var keys = Object.keys(m);
    if (keys.length) {
      var mt = el('table', {'class': 'metrics'});
      keys.forEach(function (k) { var tr = el('tr'); tr.appendChild(el('th', {}, k)); tr.appendChild(el('td', {'class': 'r'}, fmt(m[k]))); mt.appendChild(tr); });
      box.appendChild(mt);
    }
    if (run.config_diff.length) {
      var dt = el('table', {'class': 'config-diff'});
      var head = el('tr'); ['field', table.base_row + ' (same seed)', run.row].forEach(function (h) { head.appendChild(el('th', {}, h)); });
      dt.appendChild(head);
      run.config_diff.forEach(function (d) { var tr = el('tr'); d.forEach(function (c) { tr.appendChild(el('td', {'class': 'l'}, c)); }); dt.appendChild(tr); });
      box.appendChild(el('p', {}, 'Resolved config, differences from ' + table.base_row + ':'));
      box.appendChild(dt);
    } else {
      box.appendChild(el('p', {'class': 'muted config-diff-none'}, 'Resolved config equal to ' + table.base_row + '\'s (seed aside).'));
    }
    var charts = el('div', {'class': 'charts'});
    Object.keys(run.curves).sort().forEach(function (k) { charts.appendChild(chart(k, run.curves[k])); });
    if (!charts.childNodes.length) charts.appendChild(el('span', {'class': 'muted'}, 'no curves recorded'));
    box.appendChild(charts);
    return box;
  }
  var count = 0;
  data.forEach(function (table) {
    var holder = document.getElementById('runs-' + table.id);
    table.runs.forEach(function (run) { holder.appendChild(runSection(table, run)); count += 1; });
  });
  function report() {
    var images = Array.prototype.slice.call(document.querySelectorAll('.plots img'));
    var loaded = images.filter(function (img) { return img.complete && img.naturalWidth > 0; }).length;
    var status = document.getElementById('render-status');
    status.textContent = 'rendered ' + count + ' runs; plots loaded ' + loaded + '/' + images.length;
    status.setAttribute('data-runs', count);
    status.setAttribute('data-images-loaded', loaded);
    status.setAttribute('data-images', images.length);
  }
  report();
  window.addEventListener('load', report);
})();
