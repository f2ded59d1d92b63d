// Building the page: elements with attributes and text. Text always goes in
// as text nodes and attributes through setAttribute, so nothing from the
// report is ever parsed as markup.

// el('td', {class: 'num'}, ['12 GiB', child]): strings become text nodes,
// null and undefined children and attributes are left out.
function el(tag, attrs, kids) {
  const e = document.createElement(tag);
  if (attrs) {
    for (const k of Object.keys(attrs)) {
      if (attrs[k] !== undefined && attrs[k] !== null) e.setAttribute(k, String(attrs[k]));
    }
  }
  append(e, kids);
  return e;
}

function append(parent, kids) {
  if (kids === undefined || kids === null) return parent;
  for (const k of Array.isArray(kids) ? kids : [kids]) {
    if (k === undefined || k === null) continue;
    parent.appendChild(typeof k === 'object' ? k : document.createTextNode(String(k)));
  }
  return parent;
}

// A section of the page with its heading and, optionally, a line saying
// what it shows.
function panel(id, title, note) {
  return el('section', { class: 'panel', id: id }, [
    el('h2', null, title),
    note ? el('p', { class: 'note' }, note) : null,
  ]);
}

// A panel added to root; when empty is [what, why], the panel says why it
// has nothing to show and the answer is null.
function openPanel(root, id, title, note, empty) {
  const p = panel(id, title, note);
  root.appendChild(p);
  if (!empty) return p;
  p.appendChild(placeholder(empty[0], empty[1]));
  return null;
}

// What stands in for a chart or table that has nothing to show, and why.
function placeholder(what, text) {
  return el('p', { class: 'placeholder', 'data-empty': what }, text);
}

function badge(text, cls, attrs) {
  return el('span', Object.assign({ class: 'badge ' + (cls || '') }, attrs || {}), text);
}

// A colour swatch and its label, for legends.
function swatch(color, label, style) {
  const mark = el('span', { class: 'swatch ' + (style || '') });
  mark.style.borderColor = color;
  if (style !== 'dashed' && style !== 'line') mark.style.background = color;
  return el('span', { class: 'legend-item' }, [mark, label]);
}

// A table: headers are [text, class] pairs or strings; each row is
// {attrs, cells}, each cell a string, a node, or {text|node, cls, title}.
function table(cls, headers, rows) {
  const head = el('tr', null, headers.map((h) => (Array.isArray(h) ? el('th', { class: h[1] }, h[0]) : el('th', null, h))));
  const body = el('tbody');
  for (const row of rows) {
    const tr = el('tr', row.attrs);
    for (const c of row.cells) {
      if (c !== null && typeof c === 'object' && !(c instanceof Node)) {
        tr.appendChild(el('td', { class: c.cls, title: c.title }, c.node !== undefined ? c.node : c.text));
      } else {
        tr.appendChild(el('td', null, c));
      }
    }
    body.appendChild(tr);
  }
  return el('div', { class: 'table-wrap' }, el('table', { class: cls }, [el('thead', null, head), body]));
}

// A number cell.
function num(text, title) {
  return { text: text, cls: 'num', title: title };
}

// "N more ... in the JSON" under a list cut at its bound.
function moreNote(kind, shown, total, how) {
  if (total <= shown) return null;
  return el('p', { class: 'more', 'data-more': kind, 'data-more-count': total - shown },
    (total - shown) + ' more ' + kind + ' in the JSON' + (how ? ' (' + how + ')' : '') + '.');
}

// A labelled value of a summary line.
function fact(label, value, attrs) {
  return el('div', Object.assign({ class: 'fact' }, attrs || {}), [el('span', { class: 'fact-label' }, label), el('span', { class: 'fact-value' }, value)]);
}

function pctOf(part, total) {
  return isNum(part) && isNum(total) && total > 0 ? ' (' + fmtPct((100 * part) / total) + ')' : '';
}
