// steerdns live dashboard: reads GET v1/status every REFRESH_MS and redraws the page.
// Read-only by design: it never sends anything but that GET. Every value from the server is
// put into the page as text (textContent), never parsed as markup.
"use strict";

(function () {
  const REFRESH_MS = 1500;
  const FETCH_TIMEOUT_MS = 5000;
  const MAX_CHANGES_SHOWN = 12;

  let lastGood = null;
  // Alerts from the last good status, and the connection problem if any: the alert list (a
  // live region) is redrawn only when its text changes, so screen readers hear changes once.
  let serverAlerts = [];
  let connectionAlert = null;
  let shownAlerts = null;

  // el("td", {className: "x", dataset: {a: "1"}}, "text", childNode, ...)
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (key === "dataset") {
        Object.assign(node.dataset, value);
      } else if (key === "attrs") {
        for (const [name, v] of Object.entries(value)) node.setAttribute(name, v);
      } else {
        node[key] = value;
      }
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function byId(id) {
    return document.getElementById(id);
  }

  // 0.64 -> "64%", 0.025 -> "2.5%", 0 -> "0%".
  function pct(fraction) {
    if (typeof fraction !== "number" || !isFinite(fraction)) return "?";
    const v = fraction * 100;
    const text = v !== 0 && Math.abs(v) < 10 ? v.toFixed(1) : v.toFixed(0);
    return text.replace(/\.0$/, "") + "%";
  }

  function num(value) {
    if (typeof value !== "number" || !isFinite(value)) return "?";
    return Number.isInteger(value) ? String(value) : value.toFixed(1);
  }

  function list(items, empty) {
    return items.length ? items : [el("li", { className: "none" }, empty)];
  }

  // A utilisation bar with both watermarks drawn on it; the numbers are also in the text.
  function bar(utilisation, high, low) {
    const known = typeof utilisation === "number" && isFinite(utilisation);
    const level = !known ? "unknown" : utilisation >= high ? "high" : utilisation >= low ? "warm" : "ok";
    const label = known
      ? `utilisation ${pct(utilisation)}; high watermark ${pct(high)}, low watermark ${pct(low)}`
      : "no load data";
    const fill = el("span", { className: "fill level-" + level });
    fill.style.width = known ? Math.min(Math.max(utilisation, 0), 1) * 100 + "%" : "0";
    const highMark = el("span", { className: "mark mark-high", title: "high watermark " + pct(high) });
    highMark.style.left = Math.min(Math.max(high, 0), 1) * 100 + "%";
    const lowMark = el("span", { className: "mark mark-low", title: "low watermark " + pct(low) });
    lowMark.style.left = Math.min(Math.max(low, 0), 1) * 100 + "%";
    const track = el(
      "span",
      { className: "bar" + (known && utilisation > 1 ? " over" : ""), attrs: { role: "img", "aria-label": label } },
      fill,
      lowMark,
      highMark
    );
    return { track, level, known };
  }

  function utilisationCell(ring, high, low) {
    const drawn = bar(ring.utilisation, high, low);
    const text = drawn.known
      ? `${pct(ring.utilisation)} (${num(ring.load)} / ${num(ring.capacity)})`
      : "no load data";
    return el(
      "td",
      { className: "util" },
      drawn.track,
      el("span", { className: "value level-text-" + drawn.level }, text)
    );
  }

  function destinationsOf(region) {
    return Array.isArray(region.destinations) ? region.destinations : [];
  }

  // Who sends shed clients to `name`: [[region, share of that region's clients], ...].
  function incoming(regions, name) {
    const from = [];
    for (const region of regions) {
      for (const [to, share] of destinationsOf(region)) {
        if (to === name && region.shed_fraction > 0) from.push([region.name, region.shed_fraction * share]);
      }
    }
    return from;
  }

  function regionRow(region, regions, overrides, high, low) {
    const shedding = region.shed_fraction > 0;
    const destinations = destinationsOf(region);
    const stateCell = el(
      "td",
      { className: "state" },
      el("span", { className: "state-text" }, region.state || "unknown"),
      region.hot ? el("span", { className: "badge hot" }, "hot") : null,
      overrides[region.name] ? el("div", { className: "override" }, "operator: " + overrides[region.name]) : null
    );
    const shedCell = el(
      "td",
      { className: "shed" },
      shedding ? el("strong", {}, pct(region.shed_fraction)) : el("span", { className: "none" }, "none")
    );
    const flows = destinations.map(([to, share], i) =>
      el("span", { className: "dest" }, i ? ", " : "", to + " ", el("strong", {}, pct(share)))
    );
    const inbound = incoming(regions, region.name).map(([from, share]) => `${from} ${pct(share)}`);
    const flowCell = el(
      "td",
      { className: "flows" },
      shedding && flows.length
        ? el("span", { className: "flow" }, el("span", { className: "from" }, region.name), " \u2192 ", flows)
        : el("span", { className: "none" }, "\u2014"),
      inbound.length ? el("div", { className: "inbound" }, "\u2190 receiving from " + inbound.join(", ")) : null
    );
    return el(
      "tr",
      {
        className: "ring state-" + (region.state || "unknown").replace(/[^a-z]+/g, "-"),
        dataset: {
          region: region.name,
          state: region.state || "unknown",
          shed: String(region.shed_fraction),
          destinations: destinations.map(([to]) => to).join(" "),
        },
      },
      el("th", { scope: "row" }, region.name),
      utilisationCell(region, high, low),
      stateCell,
      shedCell,
      flowCell
    );
  }

  function siteRow(site, regions, high, low) {
    const inbound = incoming(regions, site.name).map(([from, share]) => `${from} (${pct(share)} of its clients)`);
    return el(
      "tr",
      { className: "ring", dataset: { site: site.name } },
      el("th", { scope: "row" }, site.name),
      utilisationCell(site, high, low),
      el(
        "td",
        { className: "flows" },
        inbound.length ? "\u2190 " + inbound.join(", ") : el("span", { className: "none" }, "\u2014")
      )
    );
  }

  function definitions(target, pairs) {
    target.replaceChildren(
      ...pairs.filter(([, v]) => v !== null && v !== undefined).flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])
    );
  }

  function renderRings(status) {
    const shield = status.shield || {};
    const regions = Array.isArray(shield.regions) ? shield.regions : [];
    const sites = Array.isArray(shield.sites) ? shield.sites : [];
    const overrides = status.regions || {};
    const high = typeof shield.high_watermark === "number" ? shield.high_watermark : 0;
    const low = typeof shield.low_watermark === "number" ? shield.low_watermark : 0;
    byId("regions").tBodies[0].replaceChildren(
      ...(regions.length
        ? regions.map((r) => regionRow(r, regions, overrides, high, low))
        : [el("tr", {}, el("td", { colSpan: 5 }, "No topology configured: nothing to shield."))])
    );
    byId("sites").tBodies[0].replaceChildren(
      ...(sites.length
        ? sites.map((s) => siteRow(s, regions, high, low))
        : [el("tr", {}, el("td", { colSpan: 3 }, "No fallback sites configured."))])
    );
    const changes = Array.isArray(shield.recent_changes) ? shield.recent_changes.slice(0, MAX_CHANGES_SHOWN) : [];
    byId("changes").tBodies[0].replaceChildren(
      ...(changes.length
        ? changes.map((c) =>
            el(
              "tr",
              {},
              el("td", {}, c.at),
              el("th", { scope: "row" }, c.tenant ? `${c.region} (tenant ${c.tenant})` : c.region),
              el("td", {}, `${pct(c.from)} \u2192 ${pct(c.to)}`),
              el("td", {}, c.reason)
            )
          )
        : [el("tr", {}, el("td", { colSpan: 4 }, "No decision changes since start."))])
    );
  }

  // Tenant-first shedding: the tenants shed on their own, ahead of their region (absent while
  // none is).
  function tenantFirstLine(shield) {
    const shed = Array.isArray(shield.tenants) ? shield.tenants : [];
    if (!shed.length) return null;
    return shed
      .map((t) => `${t.tenant} in ${t.region}: ${pct(t.shed_fraction)} shed (share ${pct(t.share)} of the region, limit ${pct(shield.tenant_share)}; ${t.state})`)
      .join("; ");
  }

  // Fleet mode: who leads, which published state this node serves, the age of its inputs.
  function fleetShieldRows(fleet) {
    if (!fleet) return [];
    const secs = (a) => (typeof a === "number" ? `${a.toFixed(1)} s` : "-");
    return [
      ["Fleet shield leader", fleet.leader || "none"],
      ["This node", `${fleet.node}: ${fleet.role}`],
      ["State revision served", fleet.revision == null ? "none" : `${fleet.revision} by ${fleet.published_by || "?"} (${secs(fleet.state_age_secs)} old)`],
      ["etcd contact", `${secs(fleet.contact_age_secs)} ago${fleet.link_error ? " \u2014 " + fleet.link_error : ""}`],
      ["Demand from", fleet.demand_from && fleet.demand_from.length ? fleet.demand_from.join(", ") : null],
      ["Cells hot (as served)", fleet.hot_cells && fleet.hot_cells.length ? fleet.hot_cells.join(", ") : null],
      ["Refused from etcd", fleet.refused ? `${fleet.refused} (last: ${fleet.last_refusal})` : null],
    ];
  }

  function renderShield(status) {
    const shield = status.shield || {};
    const age = typeof shield.feed_age_secs === "number" ? `${shield.feed_age_secs.toFixed(1)} s ago` : "no feed yet";
    definitions(byId("shield"), [
      ["Mode", shield.mode || "?"],
      ["Load feed", shield.feed_origin ? `${age} (via ${shield.feed_origin})` : age],
      ["Load sources", Array.isArray(shield.sources) && shield.sources.length ? shield.sources.join(", ") : "pushes only"],
      ["Feeds", `${shield.feeds_accepted || 0} accepted, ${shield.feeds_refused || 0} refused`],
      ["Last refused feed", shield.last_feed_refusal || null],
      ["Watermarks", `high ${pct(shield.high_watermark)}, low ${pct(shield.low_watermark)}`],
      ["Tenant-first", tenantFirstLine(shield)],
    ].concat(fleetShieldRows(shield.fleet)));
    serverAlerts = (Array.isArray(shield.alerts) ? shield.alerts : []).concat(
      (status.warnings || []).map((w) => "warning: " + w),
      status.geo && status.geo !== "ok" ? ["geo: " + status.geo] : [],
      // A refused tenant is an alert of its own: the others serve on.
      ((status.tenants && status.tenants.refused) || []).map(
        (r) => `tenant ${r.name} refused${r.serving_previous ? " (previous version serves)" : " (never served)"}: ${r.reason}`
      )
    );
  }

  function renderAlerts() {
    const alerts = (connectionAlert ? [connectionAlert] : []).concat(serverAlerts);
    const key = JSON.stringify(alerts);
    if (key === shownAlerts) return;
    shownAlerts = key;
    byId("alerts").replaceChildren(...list(alerts.map((a) => el("li", { className: "alert" }, a)), "No alerts."));
  }

  // A local override sent with --direct (etcd down): what, by whom, since when.
  function overrideText(o) {
    if (!o) return null;
    return `serial ${o.serial}: ${o.what} by ${o.by} since ${o.at} (replaced revision ${o.base_revision})`;
  }

  function renderFleet(status) {
    const f = status.fleet;
    if (!f) {
      definitions(byId("fleet"), [["Mode", "single node (control file; no [fleet] in the config)"]]);
      return;
    }
    const since = typeof f.since_secs === "number" ? ` for ${f.since_secs.toFixed(0)} s` : "";
    definitions(byId("fleet"), [
      ["Node", `${f.node} under ${f.prefix}`],
      ["etcd", (f.endpoints || []).join(", ")],
      ["Link", f.connected ? `up${since}` : `DOWN${since}: serving what this node has (${f.last_error || "?"})`],
      ["Revision", `serving ${f.revision_served}, newest seen ${f.revision_latest}`],
      ["Refused revision", typeof f.refused_revision === "number" ? String(f.refused_revision) : null],
      ["Last change applied", typeof f.last_apply_ms === "number" ? `${f.last_apply_ms.toFixed(1)} ms after it arrived` : null],
      ["Fleet convergence", typeof f.last_convergence_ms === "number" ? `${f.last_convergence_ms.toFixed(0)} ms (last change, every live node)` : null],
      ["Rollout", rolloutText(f.rollout)],
      ["Bundle", bundleText(status.bundle)],
      ["Local override", overrideText(f.local_override)],
      ["Registry for --direct", typeof f.known_nodes === "number" ? `${f.known_nodes} node(s)` : null],
    ]);
    const o = f.local_override;
    if (o && typeof o.conflict === "number") {
      serverAlerts.push(`fleet: local override serial ${o.serial} CONFLICTS with newer revision ${o.conflict} in etcd: not written over; \`steerdns control override drop\` to serve etcd's`);
    } else if (o) {
      serverAlerts.push(`fleet: serving a LOCAL OVERRIDE (serial ${o.serial}, ${o.what} by ${o.by}), not yet in etcd`);
    }
    const b = status.bundle;
    if (b && b.refused) {
      serverAlerts.push(`fleet: bundle ${b.refused.bundle} (config/zone/GeoIP files) refused, serving ${b.serving}: ${(b.refused.reasons || []).join("; ")}`);
    }
    if (!f.connected) serverAlerts.push(`fleet: etcd link down${since}; serving the last good control state`);
    if (typeof f.refused_revision === "number") serverAlerts.push(`fleet: revision ${f.refused_revision} refused here`);
    if (f.rollout && f.rollout.phase === "halted") {
      serverAlerts.push(`fleet: rollout of revision ${f.rollout.candidate} HALTED, every node back on ${f.rollout.lkg}: ${f.rollout.halted || "?"}`);
    }
    if (f.rollout && (f.rollout.phase === "missing" || f.rollout.phase === "unreadable")) {
      serverAlerts.push(`fleet: rollout state ${f.rollout.phase}: holding at revision ${f.rollout.allowed}${f.rollout.phase === "unreadable" ? " until `steerdns rollout reset`" : " until the coordinator re-creates it"}`);
    }
    for (const bad of f.bad_records || []) {
      serverAlerts.push(`fleet: record skipped (${bad.seen_by}): ${bad.key}: ${bad.reason}`);
    }
    if (f.coordinator_error) serverAlerts.push(`fleet: rollout coordinator failing: ${f.coordinator_error}`);
    if (f.registration_refused) serverAlerts.push(`fleet: not registered: ${f.registration_refused}`);
  }

  // Practice drills: each one's last run with its measured times; a failed one is an alert.
  function renderDrills(status) {
    const d = status.drills || {};
    const ms = (v) => (typeof v === "number" ? `${v.toFixed(0)} ms` : "-");
    const rows = (d.drills || []).map((drill) => {
      const r = drill.last;
      const text = r
        ? `${r.result} at ${r.started} (${r.trigger}): change to served ${ms(r.change_to_served_ms)}, revert to served ${ms(r.revert_to_served_ms)}${(r.nodes || []).length ? " on every node (" + r.nodes.join(" ") + ")" : ""}${r.reason ? "; " + r.reason : ""}`
        : "never run";
      return [drill.name, text];
    });
    if (d.running) rows.push(["Now", "a drill is running"]);
    definitions(byId("drills"), rows.length ? rows : [["Drills", "none configured ([[drills]] in the config)"]]);
    for (const alert of d.alerts || []) serverAlerts.push(alert);
  }

  function bundleText(b) {
    if (!b) return null;
    const parts = [`serving ${b.serving}`];
    if (b.pending) parts.push(`live files (bundle ${b.pending}) tasted, waiting for the fleet's rollout`);
    if (b.previous) parts.push(`previous ${b.previous}`);
    return parts.join("; ");
  }

  function rolloutText(r) {
    if (!r) return null;
    const wave = typeof r.wave === "number" ? `wave ${r.wave}` : "no wave";
    const parts = [`${r.phase}: revision ${r.candidate} from ${r.lkg}, ${r.released} of ${r.waves} wave(s) released; this node ${wave}`];
    if (r.emergency) parts.push("emergency (no bake)");
    if (r.held) parts.push(`held: serving ${r.allowed} until its wave is released`);
    if (r.coordinator) parts.push("this node coordinates");
    return parts.join("; ");
  }

  function tenantsLine(t) {
    if (!t || !t.count) return "none";
    const refused = (t.refused || [])
      .map((r) => `${r.name} refused${r.serving_previous ? " (previous version serves)" : " (never served)"}: ${r.reason}`)
      .join("; ");
    const cache = t.cache_loaded != null
      ? `started from the cache (${t.cache_loaded} tenants)`
      : `cache not used at start${t.cache_not_used ? ` (${t.cache_not_used})` : ""}`;
    const writes = `cache written ${t.cache_writes || 0}×${t.cache_error ? `, last write failed: ${t.cache_error}` : ""}`;
    return `${t.count} documents, ${t.served} served (${t.suspended} suspended${t.quarantined ? `, ${t.quarantined} quarantined` : ""}), ${(t.refused || []).length} refused` +
      (refused ? ` — ${refused}` : "") + `; ${cache}; ${writes}`;
  }

  function renderControl(status) {
    definitions(byId("control"), [
      ["Serial", String(status.serial)],
      ["Loaded", `${status.loaded_at || "?"} by ${status.loaded_by || "?"}`],
      ["Config hash", status.config_hash ? String(status.config_hash).slice(0, 16) : "?"],
      ["Reloads", `${status.reloads_accepted || 0} accepted, ${status.reloads_refused || 0} refused`],
      ["Startup", status.startup ? `first answer after ${Math.round(status.startup.first_answer_ms || 0)} ms; ${status.startup.reason || ""}` : "?"],
      ["Zones", (status.zones || []).map((z) => `${z.origin} (serial ${z.serial})`).join(", ") || "none"],
      ["Tenants", tenantsLine(status.tenants)],
      ["Cells", cellsLine(status.cells)],
      ...tenantProbesLine(status.tenants),
      ...budgetsLine(status.budgets),
      ...supervised(status),
      ...connectionLimits(status),
    ]);
    const refusal = status.last_refusal;
    byId("refusal").replaceChildren(
      refusal
        ? el(
            "div",
            { className: "refusal" },
            el("p", {}, `${refusal.at} (${refusal.trigger}): refused, the previous version keeps serving.`),
            el("ul", {}, (refusal.reasons || []).map((r) => el("li", {}, r)))
          )
        : el("p", { className: "none" }, "None since start.")
    );
    const overrides = Object.entries(status.regions || {});
    byId("overrides").replaceChildren(
      ...list(
        overrides.map(([region, what]) => el("li", {}, `${region}: ${what}`)),
        "None: every region follows the shield."
      )
    );
  }

  // Tenants' own monitors (absent while no tenant has one): each tenant's monitors, how many
  // are down, and whether its checks are spread out over its probe budget (throttled).
  function tenantProbesLine(t) {
    const probes = (t && Array.isArray(t.probes)) ? t.probes : [];
    if (!probes.length) return [];
    return [[
      "Tenant monitors",
      probes.map((p) => `${p.tenant}: ${num(p.monitors)} monitor(s), ${num(p.down)} down` +
        (p.throttled
          ? `, THROTTLED (${Number(p.demand_per_second).toFixed(1)}/s asked of ${Number(p.budget_per_second).toFixed(1)}/s, ${num(p.deferred_total)} checks deferred)`
          : "")).join("; "),
    ]];
  }

  // Per-tenant budgets (absent when [budgets] is off): engaged or not, load, what they shed.
  function budgetsLine(b) {
    if (!b) return [];
    const state = b.engaged ? "ENGAGED" : "not engaged";
    return [[
      "Tenant budgets",
      `${state}: ${num(b.qps)} UDP queries/s of ${num(b.capacity_qps)} (engage at ${num(b.engage_qps)}); ` +
        `${num(b.tenant_rate)} responses/s per tenant while engaged; over budget ${num(b.dropped)} dropped, ` +
        `${num(b.slipped)} truncated; engaged ${num(b.engagements)}× since start`,
    ]];
  }

  // Cells left out of tenants' answers and blame's verdict (absent while no cell is impaired).
  function cellsLine(c) {
    if (!c) return "none impaired";
    const cells = (c.impaired || []).map((i) => `${i.layer}/${i.cell} (${i.reason})`).join(", ");
    const b = c.blame;
    if (!b) return `impaired: ${cells}`;
    const names = (b.suspects || []).map((s) => `${s.tenant} (${s.covers}/${b.impaired})`).join(", ");
    const chance = `${Number(b.by_chance).toFixed(2)} expected by chance`;
    return `impaired: ${cells}; blame ${b.verdict}: ${num(b.tied)} of ${num(b.tenants)} tenants hold ` +
      `${num(b.best_cover)}${names ? ` — ${names}` : ""}; ${chance}`;
  }

  // The daemon's threads and tasks (absent from older servers); one that ended early is named.
  function supervised(status) {
    const s = status.supervisor;
    if (!s) return [];
    const ended = s.last_unexpected
      ? `${num(s.unexpected_exits)} ENDED UNEXPECTEDLY (last: ${s.last_unexpected})`
      : "none ended unexpectedly";
    return [["Threads and tasks", `${num(s.running)} running of ${num(s.started)} started; ${ended}`]];
  }

  // The admin endpoint's connections and the descriptor budget (absent from older servers).
  function connectionLimits(status) {
    const rows = [];
    const a = status.admin_connections;
    if (a) {
      rows.push([
        "Admin connections",
        `${num(a.open)} open of ${num(a.max_connections)}; closed ${num(a.closed_header_timeout)} slow heads, ` +
          `${num(a.closed_idle_timeout)} idle, ${num(a.evicted)} evicted; ` +
          `refused ${num(a.refused_full + a.refused_descriptors)}`,
      ]);
    }
    const d = status.descriptors;
    if (d && d.limit > 0) {
      rows.push([
        "File descriptors",
        `about ${num(d.open_estimate)} of ${num(d.limit)} open, ${num(d.reserve)} kept free; ` +
          `${num(d.refused_dns)} DNS connections refused to keep them`,
      ]);
    }
    return rows;
  }

  function renderProfiles(status) {
    const profiles = Object.entries(status.profiles || {});
    byId("profiles").replaceChildren(
      ...(profiles.length
        ? profiles.map(([name, endpoints]) => profileTable(name, endpoints))
        : [el("p", { className: "none" }, "No profiles configured.")])
    );
  }

  function profileTable(name, endpoints) {
    const entries = Object.entries(endpoints);
    const total = entries.reduce((sum, [, e]) => sum + (e.enabled && typeof e.weight === "number" ? e.weight : 0), 0);
    const rows = entries.map(([endpoint, e]) => {
      const weighted = typeof e.weight === "number";
      const share = weighted && total > 0 && e.enabled ? e.weight / total : 0;
      const meter = el("span", { className: "weight-bar", attrs: { "aria-hidden": "true" } });
      const fill = el("span", { className: "fill" });
      fill.style.width = share * 100 + "%";
      meter.append(fill);
      return el(
        "tr",
        { className: e.enabled ? "" : "disabled", dataset: { endpoint } },
        el("th", { scope: "row" }, endpoint),
        el("td", {}, weighted ? [meter, ` ${e.weight} (${pct(share)})`] : "by region"),
        el("td", {}, e.enabled ? "enabled" : "disabled")
      );
    });
    return el(
      "table",
      { className: "profile", dataset: { profile: name } },
      el("caption", {}, name),
      el(
        "thead",
        {},
        el("tr", {}, el("th", { scope: "col" }, "Endpoint"), el("th", { scope: "col" }, "Weight"), el("th", { scope: "col" }, "State"))
      ),
      el("tbody", {}, rows)
    );
  }

  function renderHealth(status) {
    const h = status.health;
    if (!h) {
      byId("health").replaceChildren(el("p", { className: "none" }, "No monitored endpoints."));
      return;
    }
    if (h.lookups_in_flight >= 4) {
      // Every lookup slot taken (lookups take milliseconds): the system resolver hangs, and
      // probes of names not being looked up fail at once.
      serverAlerts.push("health: all 4 name lookups of probe targets in flight: the system resolver may hang");
    }
    const sharing = h.sharing;
    const columns = ["Target", "State", "Last check", "Last change", "Last error"];
    if (sharing) columns.push("Probers (quorum)");
    const head = el("tr", {}, ...columns.map((t) => el("th", { scope: "col" }, t)));
    const rows = (h.targets || []).map((t) => {
      const took = typeof t.last_latency_ms === "number" ? `${t.last_latency_ms.toFixed(1)} ms` : "none yet";
      if (t.state === "down") serverAlerts.push(`health: ${t.target} down (${t.last_error || "?"})`);
      const cells = [
        el("th", { scope: "row" }, t.target),
        el("td", {}, `${t.state} (${t.checks} checks, ${t.failures} failed)`),
        el("td", {}, took),
        el("td", {}, t.last_change || "never"),
        el("td", {}, t.last_error || ""),
      ];
      const s = t.shared;
      if (s) {
        const votes = (s.probers || []).map((p) => `${p.node} ${p.vote}`).join(", ");
        cells.push(
          el("td", { className: "probers" }, `${votes || "none"}; ${s.down_votes}/${s.reporting} down, down at ${s.quorum} (${s.decided_by})`)
        );
      }
      return el("tr", { className: t.state === "down" ? "disabled" : "", dataset: { target: t.target } }, ...cells);
    });
    const shared = [];
    if (sharing) {
      const link = sharing.connected
        ? "connected"
        : sharing.fail_static
          ? `etcd unreachable since ${sharing.since}: serving the last shared view (fail-static)`
          : "not connected yet: this node probes every target itself and serves what it sees";
      if (!sharing.connected) serverAlerts.push(`health sharing: ${link}`);
      for (const r of sharing.refused || []) serverAlerts.push(`health sharing: refused ${r}`);
      const probers = (sharing.probers || []).map((p) => (p.site ? `${p.node} (${p.site})` : p.node)).join(", ");
      shared.push(
        el(
          "p",
          { className: "sharing" },
          `Shared by the fleet: ${sharing.probers_per_target} prober(s) per target, ${link}. Probers: ${probers}. This node probes ${(sharing.probing_here || []).length} target(s).`
        )
      );
    }
    const endpoints = (h.endpoints || []).map((e) =>
      el(
        "li",
        { dataset: { endpoint: `${e.profile}/${e.endpoint}` } },
        `${e.profile}/${e.endpoint}: ${e.served ? "served" : "SKIPPED"} (${e.state}${e.forced_up ? ", forced up" : ""})`
      )
    );
    byId("health").replaceChildren(
      ...shared,
      el("table", { className: "health" }, el("thead", {}, head), el("tbody", {}, rows)),
      el("ul", {}, endpoints)
    );
  }

  // What each turned-away counter means, in the order the table shows them.
  const TURNED_AWAY = [
    ["refused_per_client", "over the per-client share"],
    ["refused_full", "every slot busy"],
    ["handshake_failed", "bad handshake"],
    ["handshake_timeout", "handshake too slow"],
    ["frame_timeout", "query too slow"],
    ["bad_request", "bad HTTP request"],
    ["closed_stalled_to_make_room", "holding a slot, making no progress"],
  ];

  function renderEncrypted(status) {
    const e = status.encrypted;
    if (!e) {
      byId("encrypted").replaceChildren(el("p", { className: "none" }, "Off (no [server.tls] in the config)."));
      return;
    }
    const listening = {};
    for (const l of e.listeners || []) (listening[l.transport] = listening[l.transport] || []).push(l.addr);
    const head = el(
      "tr",
      {},
      ...["Transport", "Listening on", "Queries", "Connections", "Turned away"].map((t) => el("th", { scope: "col" }, t))
    );
    const rows = (e.transports || []).map((t) => {
      const away = TURNED_AWAY.filter(([key]) => t[key] > 0).map(([key, what]) => `${t[key]} ${what}`);
      return el(
        "tr",
        { dataset: { transport: t.transport } },
        el("th", { scope: "row" }, t.transport),
        el("td", {}, (listening[t.transport] || []).join(", ") || "not listening"),
        el("td", {}, num(t.queries)),
        el("td", {}, `${num(t.connections_open)} open, ${num(t.connections_accepted)} accepted`),
        el("td", {}, away.length ? away.join(", ") : "none")
      );
    });
    const c = e.certificate;
    // An expiry warning is also among status.warnings, so the alert list has it already.
    const certificate = c
      ? el(
          "p",
          { className: "certificate", dataset: { daysLeft: String(c.days_left) } },
          `Certificate ${c.cert}: valid until ${c.not_after} (${c.days_left} day(s) left).`,
          c.warning ? el("strong", { className: "warning" }, ` ${c.warning}`) : null
        )
      : el("p", { className: "none" }, "No certificate loaded.");
    byId("encrypted").replaceChildren(
      certificate,
      el("table", { className: "encrypted" }, el("thead", {}, head), el("tbody", {}, rows))
    );
  }

  // Per zone: the serial served and transferred, what the transfers carry (the projection of
  // steered names, or the catalog's members) and the NOTIFY targets' acknowledged serials.
  function renderTransfer(status) {
    const zones = status.transfer;
    if (!zones) {
      byId("transfer").replaceChildren(el("p", { className: "none" }, "Off (no [transfer] in the config)."));
      return;
    }
    const head = el(
      "tr",
      {},
      ...["Zone", "Serial", "Carries", "NOTIFY acked"].map((t) => el("th", { scope: "col" }, t))
    );
    const rows = Object.entries(zones).map(([name, z]) => {
      const carries =
        z.catalog_members != null
          ? `catalog of ${num(z.catalog_members)} zone(s)`
          : `${num(z.projected_names)} steered name(s) projected, ${num(z.omitted_names)} omitted`;
      const acked = Object.entries(z.notify || {}).map(([t, n]) => `${t}: ${n.acked_serial ?? "not yet"}`);
      return el(
        "tr",
        { dataset: { zone: name } },
        el("th", { scope: "row" }, name),
        el("td", {}, z.serial === z.file_serial ? String(z.serial) : `${z.serial} (file ${z.file_serial})`),
        el("td", {}, carries),
        el("td", {}, acked.length ? acked.join(", ") : "no targets")
      );
    });
    byId("transfer").replaceChildren(
      el("table", { className: "transfer" }, el("thead", {}, head), el("tbody", {}, rows))
    );
  }

  // Secondary zones (zone transfers in): the serial served, the last transfer in, when the
  // copy expires (or that it has: answered SERVFAIL) and the last refusal.
  function renderSecondary(status) {
    const zones = Object.entries(status.secondary || {});
    if (!zones.length) {
      byId("secondary").replaceChildren(el("p", { className: "none" }, "No secondary zones."));
      return;
    }
    const head = el(
      "tr",
      {},
      ...["Zone", "Serial", "Last transfer in", "Expiry", "Last refusal"].map((t) =>
        el("th", { scope: "col" }, t)
      )
    );
    const rows = zones.map(([name, z]) => {
      const last = z.last_transfer
        ? `${z.last_transfer_kind} serial ${z.last_transfer_serial} at ${z.last_transfer}: ${z.last_result}`
        : "none yet";
      const expiry = z.expired
        ? "EXPIRED: answered SERVFAIL until a primary answers"
        : z.expires_at
          ? `expires ${z.expires_at}; next refresh ${z.next_refresh ?? "-"}`
          : `no copy yet; next try ${z.next_refresh ?? "-"}`;
      return el(
        "tr",
        { dataset: { secondary: name, expired: String(Boolean(z.expired)) } },
        el("th", { scope: "row" }, name),
        el("td", {}, z.serial != null ? String(z.serial) : "none"),
        el("td", {}, last),
        el("td", { className: z.expired ? "warning" : "" }, expiry),
        el("td", {}, z.last_refusal || z.key_problem || "none")
      );
    });
    byId("secondary").replaceChildren(
      el("table", { className: "transfer" }, el("thead", {}, head), el("tbody", {}, rows))
    );
  }

  function render(status) {
    renderRings(status);
    renderShield(status);
    renderFleet(status);
    renderDrills(status);
    renderControl(status);
    renderProfiles(status);
    renderHealth(status);
    renderEncrypted(status);
    renderTransfer(status);
    renderSecondary(status);
  }

  function setConnection(ok, detail) {
    document.body.dataset.connection = ok ? "ok" : "error";
    const now = new Date().toISOString().replace(/\.\d+Z$/, "Z");
    const text = ok
      ? `Updated ${now}: serial ${detail}.`
      : `Cannot read /v1/status (${detail}) at ${now}` +
        (lastGood ? `; showing data from ${lastGood}.` : "; no data yet.");
    byId("connection").textContent = text;
    // Said once when the connection is lost, not at every failed retry.
    if (!ok && !connectionAlert) connectionAlert = "dashboard: " + text;
    if (ok) connectionAlert = null;
    renderAlerts();
  }

  async function refresh() {
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), FETCH_TIMEOUT_MS);
    try {
      const response = await fetch("v1/status", {
        cache: "no-store",
        headers: { Accept: "application/json" },
        signal: abort.signal,
      });
      if (!response.ok) throw new Error("HTTP " + response.status);
      const status = await response.json();
      render(status);
      lastGood = new Date().toISOString().replace(/\.\d+Z$/, "Z");
      setConnection(true, status.serial);
    } catch (error) {
      setConnection(false, error && error.message ? error.message : String(error));
    } finally {
      clearTimeout(timer);
      setTimeout(refresh, REFRESH_MS);
    }
  }

  refresh();
})();
