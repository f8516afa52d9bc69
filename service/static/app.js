"use strict";
// Atelier's page: one static script over the same JSON/multipart API as any client.
//
// - Samples (GET /samples: the server's samples folder) to click; one's own photo and
//   paintings by file picker, drag and drop, or paste, with thumbnails.
// - Both forms start an async job (Prefer: respond-async, so large sizes are never refused
//   as too dear for a synchronous answer) with previews=true, follow its progress on the
//   job's Server-Sent Events (read with fetch, so the API key header goes along), show
//   its 'preview' events (small JPEGs of the work so far) until the result replaces
//   them, and can cancel it.
// - The result: a before/after slider over the photo; download; use it as the photo;
//   generate the same again with another seed.
// - The gallery: the key's recent jobs (GET /v1/jobs, a page at a time: offset and
//   next_offset) with thumbnails (GET /v1/jobs/{id}/thumbnail, or made in the page from
//   a result it has) kept in IndexedDB with the inputs this browser sent, so a job
//   reopens with its parameters (and its images, when they were sent from here).
// - An error answer names its field ("size: at most 1024"): it shows next to that field.
// Requests stay few: the gallery is refreshed at most once a second (every 5 s while a
// job this page does not follow is unfinished, never while the page is hidden), and a
// thumbnail is fetched once, a page of cards at a time, two at once.

const $ = (id) => document.getElementById(id);

function authHeaders() {
  const key = $("api-key").value.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

function setStatus(element, text, isError) {
  element.textContent = text;
  element.classList.toggle("error", Boolean(isError));
}

// The {code, message} of an error answer, or null when its body is not the envelope.
async function errorOf(response) {
  try {
    const { error } = await response.json();
    return error && typeof error.message === "string" ? error : null;
  } catch {
    return null;
  }
}

function describeError(response, error) {
  return error
    ? `${response.status} ${error.code}: ${error.message}`
    : `${response.status} ${response.statusText}`;
}

async function errorText(response) {
  return describeError(response, await errorOf(response));
}

// Progress in the job's own unit ("pass", "tile", "sampler step"): "tile 3 of 48".
function progressText({ unit, step, total }) {
  return `${unit} ${step} of ${total}`;
}

function kilobytes(bytes) {
  return bytes >= 1024 * 1024 ? `${(bytes / 1024 / 1024).toFixed(1)} MB` : `${Math.ceil(bytes / 1024)} kB`;
}

function element(tag, properties = {}, ...children) {
  const made = document.createElement(tag);
  for (const [name, value] of Object.entries(properties)) {
    if (name === "class") made.className = value;
    else if (name.startsWith("aria-") || name === "for" || name === "role") made.setAttribute(name, value);
    else made[name] = value;
  }
  made.append(...children);
  return made;
}

// Yield each {event, data} of a text/event-stream response body.
async function* serverSentEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replaceAll("\r\n", "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
      }
      if (data.length) yield { event, data: JSON.parse(data.join("\n")) };
    }
  }
}

// ------------------------------------------------------------------ errors by field
// Which control each API field is, per form; an error shows in "<control>-error".
const FIELDS = {
  stylize: {
    content: "content",
    style: "styles",
    style_weights: "styles",
    mask: "styles",
    alpha: "alpha",
    preserve_color: "preserve-color",
    preset: "preset",
    style_scale: "style-scale",
    size: "size",
    format: "format",
    quality: "quality",
  },
  generate: {
    prompt: "prompt",
    negative_prompt: "negative-prompt",
    num_images: "num-images",
    seed: "seed",
    sampler: "sampler",
    steps: "steps",
    guidance_scale: "guidance-scale",
    plan_layout: "plan-layout",
  },
};

// Where a field's error goes: {control, error}. A painting's own error ("style[1]: ...",
// "mask[0]: ...") goes on its card; the others of the paintings under the paintings.
function fieldPlace(form, field, index) {
  if (form === "stylize" && (field === "style" || field === "mask") && index !== undefined) {
    const card = $(`painting-${index}-error`);
    if (card) return { control: $(`${field === "mask" ? "mask" : "weight"}-${index}`), error: card };
  }
  const id = FIELDS[form][field];
  if (!id) return null;
  const error = $(id === "styles" ? "paintings-error" : `${id}-error`);
  return { control: $(id), error };
}

// The fields an error message names, with what it says of each: "size: at most 1024",
// "style[1]: ...", "seed: ...; steps: ..." (a 422 lists several), "steps must be in
// [1, 1000]"; a stylize cost refusal names no field but speaks of the size.
function fieldsOf(form, message) {
  const found = [];
  for (const part of message.split("; ")) {
    const match = /^([a-z_]+)(?:\[(\d+)\]|\.(\d+))?(?::\s*| (?=must\b))(.*)$/s.exec(part);
    if (match && FIELDS[form][match[1]]) {
      found.push({ field: match[1], index: match[2] ?? match[3], text: match[4] });
    }
  }
  if (!found.length && form === "stylize" && /\bsize\b/.test(message)) {
    found.push({ field: "size", text: message });
  }
  if (!found.length && form === "generate" && /^steps x num_images/.test(message)) {
    found.push({ field: "steps", text: message });
  }
  return found;
}

function showFieldError(form, field, index, text) {
  const place = fieldPlace(form, field, index);
  if (!place) return null;
  const sentence = text.charAt(0).toUpperCase() + text.slice(1);
  place.error.textContent = place.error.textContent ? `${place.error.textContent} ${sentence}` : sentence;
  if (place.control) place.control.setAttribute("aria-invalid", "true");
  return place.control;
}

// Show an API error next to the fields it names; focus the first of them. True if any.
function showFieldErrors(form, error) {
  if (!error) return false;
  const controls = fieldsOf(form, error.message).map(({ field, index, text }) =>
    showFieldError(form, field, index, text),
  );
  const first = controls.find(Boolean);
  if (first && !first.disabled) first.focus();
  return controls.length > 0;
}

function clearFieldErrors(formElement) {
  for (const error of formElement.querySelectorAll(".field-error")) error.textContent = "";
  for (const control of formElement.querySelectorAll("[aria-invalid]"))
    control.removeAttribute("aria-invalid");
}

// A field's error goes once the field changes.
for (const form of [$("stylize-form"), $("generate-form")]) {
  const clear = (event) => {
    const control = event.target;
    if (!control.hasAttribute("aria-invalid")) return;
    control.removeAttribute("aria-invalid");
    const error = $(`${control.id}-error`);
    if (error) error.textContent = "";
  };
  form.addEventListener("input", clear);
  form.addEventListener("change", clear);
}

// ------------------------------------------------------------------ IndexedDB
// What this browser keeps: the inputs it sent per job ("inputs") and the gallery's
// thumbnails ("thumbs"), each bounded; the page works without it (private windows).
const keep = (() => {
  let opened = null;
  const LIMITS = { inputs: 24, thumbs: 200 };
  function open() {
    opened ??= new Promise((resolve) => {
      try {
        const request = indexedDB.open("atelier-page", 1);
        request.onupgradeneeded = () => {
          for (const name of Object.keys(LIMITS)) request.result.createObjectStore(name);
        };
        request.onsuccess = () => {
          request.result.onversionchange = () => request.result.close(); // let it be deleted
          resolve(request.result);
        };
        request.onerror = () => resolve(null);
      } catch {
        resolve(null);
      }
    });
    return opened;
  }
  async function run(store, mode, action) {
    const database = await open();
    if (!database) return undefined;
    return new Promise((resolve) => {
      const transaction = database.transaction(store, mode);
      const request = action(transaction.objectStore(store));
      transaction.oncomplete = () => resolve(request?.result);
      transaction.onerror = transaction.onabort = () => resolve(undefined);
    });
  }
  async function prune(store) {
    const all = (await run(store, "readonly", (s) => s.getAll())) ?? [];
    if (all.length <= LIMITS[store]) return;
    all.sort((a, b) => a.saved - b.saved);
    const old = all.slice(0, all.length - LIMITS[store]).map((entry) => entry.id);
    await run(store, "readwrite", (s) => {
      for (const id of old) s.delete(id);
    });
  }
  return {
    get: (store, id) => run(store, "readonly", (s) => s.get(id)),
    async put(store, id, value) {
      await run(store, "readwrite", (s) => s.put({ ...value, id, saved: Date.now() }, id));
      await prune(store);
    },
    forget: (id) =>
      Promise.all(Object.keys(LIMITS).map((store) => run(store, "readwrite", (s) => s.delete(id)))),
  };
})();

// ------------------------------------------------------------------ key, limits, models
let limits = null; // GET /v1/limits
let passes = { quality: 1.328125, realtime: 1.328125 }; // AdaIN's full-size passes per preset
let ditDefaults = null;

async function showKey() {
  const whoami = $("whoami");
  try {
    const response = await fetch("/v1/me", { headers: authHeaders() });
    if (!response.ok) {
      setStatus(
        whoami,
        response.status === 401 ? "No valid key: enter one." : await errorText(response),
        true,
      );
      $("jobs-list").replaceChildren();
      return;
    }
    const me = await response.json();
    setStatus(whoami, `Key in use: ${me.key}`);
    refreshJobs();
  } catch (error) {
    setStatus(whoami, `Network error: ${error}`, true);
  }
}

// Sizes offered beside the number field, up to the server's max_side.
const SIZE_CHOICES = [512, 1024, 2048, 4096, 8192, 16384];

// The server's limits: the size field goes up to its max_side, and the hint says from
// which size a photo is painted at its own resolution, tile by tile. Without them (no
// valid key yet) the field has no maximum and the server still checks.
async function showLimits() {
  const response = await fetch("/v1/limits", { headers: authHeaders() });
  if (!response.ok) return;
  limits = await response.json();
  const { stylize } = limits;
  const size = $("size");
  size.max = stylize.max_side;
  const choices = SIZE_CHOICES.filter((choice) => choice < stylize.max_side);
  $("size-choices").replaceChildren(
    ...[...choices, stylize.max_side].map((choice) => new Option(`${choice} px`, choice)),
  );
  const megabytes = Math.floor(stylize.max_upload_bytes / (1024 * 1024));
  $("size-hint").textContent =
    `Up to ${stylize.max_side} px on this server; uploads up to ${megabytes} MiB in all. ` +
    `Above ${stylize.print_size_above} px the photo is painted at its own resolution, ` +
    "tile by tile (progress counts tiles).";
  showCost();
  showGenerateCost();
}

// The models' figures the forms use: AdaIN's passes per preset (the cost), the DiT's
// samplers and defaults.
async function showModels() {
  const response = await fetch("/v1/models", { headers: authHeaders() });
  if (!response.ok) return;
  const { models } = await response.json();
  for (const model of models) {
    if (model.name === "adain" && model.details?.full_size_passes) passes = model.details.full_size_passes;
    if (model.name === "dit" && model.details?.defaults) ditDefaults = model.details.defaults;
  }
  if (ditDefaults) {
    const sampler = $("sampler");
    const chosen = sampler.value;
    sampler.replaceChildren(
      new Option(`the model's default (${ditDefaults.sampler})`, ""),
      ...ditDefaults.samplers.map((name) => new Option(name, name)),
    );
    sampler.value = chosen;
    $("steps").placeholder = `default: ${ditDefaults.steps}`;
    $("steps").max = ditDefaults.max_steps;
    $("guidance-scale").placeholder = `default: ${ditDefaults.guidance_scale}`;
  }
  showCost();
  showGenerateCost();
}

function onKeyChange() {
  showKey();
  showLimits();
  showModels();
}

$("api-key").addEventListener("change", onKeyChange);

// ------------------------------------------------------------------ photo and paintings
const MAX_PAINTINGS = 4;
// The photo {blob, name, url, sample} and the paintings [{blob, name, url, sample, weight,
// mask: {blob, name, url} | null}]; url: an object URL for the thumbnail.
let photo = null;
let paintings = [];

function isVideo(blob) {
  return Boolean(blob) && blob.type.startsWith("video/");
}

function picked(blob, name, sample = null) {
  return { blob, name, sample, url: URL.createObjectURL(blob) };
}

function setPhoto(blob, name, sample = null) {
  if (photo) URL.revokeObjectURL(photo.url);
  photo = picked(blob, name, sample);
  const thumb = $("content-thumb");
  thumb.hidden = !blob.type.startsWith("image/");
  if (!thumb.hidden) thumb.src = photo.url;
  $("content-name").textContent = sample
    ? `${sample.title} (a sample, ${kilobytes(blob.size)})`
    : `${name} (${kilobytes(blob.size)})`;
  $("content-error").textContent = "";
  $("content").removeAttribute("aria-invalid");
  const size = $("size");
  if (isVideo(blob)) {
    // A video keeps its own size unless asked for less: choosing one empties the size field.
    size.value = "";
    size.placeholder = "the video's own size";
    if (limits) {
      const { video } = limits;
      $("content-hint").textContent =
        `A video comes back in its own format, frame rate and sound: up to ${video.max_seconds} s ` +
        `and ${video.max_side} px here (a size scales it down). Progress counts frames.`;
    }
  } else if (size.value === "") {
    size.value = "512";
  }
  markSamples();
  showCost();
}

function addPainting(blob, name, sample = null) {
  if (paintings.length >= MAX_PAINTINGS) {
    showFieldError("stylize", "style", undefined, `at most ${MAX_PAINTINGS} paintings: remove one first.`);
    return false;
  }
  paintings.push({ ...picked(blob, name, sample), weight: 1, mask: null });
  return true;
}

function removePainting(index) {
  const [gone] = paintings.splice(index, 1);
  URL.revokeObjectURL(gone.url);
  if (gone.mask) URL.revokeObjectURL(gone.mask.url);
  renderPaintings();
  const next = document.querySelector(`#painting-${Math.min(index, paintings.length - 1)} .remove`);
  (next ?? $("styles")).focus();
}

function masked() {
  return paintings.some((painting) => painting.mask);
}

// A painting's share of the mix, in per cent, from the weights.
function shares() {
  const total = paintings.reduce((sum, painting) => sum + painting.weight, 0);
  return paintings.map((painting) => (total > 0 ? Math.round((100 * painting.weight) / total) : 0));
}

function showShares() {
  const percent = shares();
  const off = masked();
  paintings.forEach((painting, i) => {
    const slider = $(`weight-${i}`);
    slider.disabled = off || paintings.length === 1;
    $(`weight-${i}-value`).textContent = off ? "masked" : `${percent[i]} % of the mix`;
  });
}

function renderPaintings() {
  $("paintings").replaceChildren(
    ...paintings.map((painting, i) => {
      const title = painting.sample ? painting.sample.title : painting.name;
      const weight = element("input", {
        id: `weight-${i}`,
        type: "range",
        min: "0",
        max: "1",
        step: "0.05",
        value: String(painting.weight),
        "aria-describedby": `painting-${i}-name weight-${i}-value painting-${i}-error`,
      });
      weight.addEventListener("input", () => {
        painting.weight = Number(weight.value);
        showShares();
      });
      const maskInput = element("input", {
        id: `mask-${i}`,
        type: "file",
        accept: "image/*",
        "aria-describedby": `painting-${i}-name mask-${i}-name painting-${i}-error`,
      });
      maskInput.addEventListener("change", () => {
        if (maskInput.files[0]) setMask(i, maskInput.files[0], maskInput.files[0].name);
      });
      const maskParts = [
        element("label", { for: `mask-${i}` }, "Mask (white where this painting goes)"),
        maskInput,
      ];
      const maskName = element(
        "span",
        { id: `mask-${i}-name` },
        painting.mask ? `mask: ${painting.mask.name}` : "",
      );
      if (painting.mask) {
        const clear = element(
          "button",
          { type: "button", class: "small", "aria-describedby": `painting-${i}-name` },
          "Remove the mask",
        );
        clear.addEventListener("click", () => setMask(i, null));
        maskParts.push(element("img", { class: "thumb", src: painting.mask.url, alt: "" }), maskName, clear);
      } else {
        maskParts.push(maskName);
      }
      const remove = element(
        "button",
        { type: "button", class: "small remove", "aria-describedby": `painting-${i}-name` },
        "Remove",
      );
      remove.addEventListener("click", () => removePainting(i));
      const card = element(
        "li",
        { id: `painting-${i}`, class: "painting" },
        element("img", { class: "thumb", src: painting.url, alt: "" }),
        element(
          "div",
          { class: "painting-body" },
          element(
            "div",
            { class: "painting-head" },
            element("p", { id: `painting-${i}-name`, class: "painting-name" }, `Painting ${i + 1}: ${title}`),
            remove,
          ),
          element(
            "label",
            { for: `weight-${i}` },
            "Weight ",
            element("output", { id: `weight-${i}-value`, for: `weight-${i}` }),
          ),
          weight,
          element("div", { class: "mask-row" }, ...maskParts),
          element("p", { id: `painting-${i}-error`, class: "field-error" }),
        ),
      );
      dropTarget(card, (files) => setMask(i, files[0], files[0].name));
      return card;
    }),
  );
  showShares();
  markSamples();
  showCost();
}

function setMask(index, blob, name) {
  const painting = paintings[index];
  const focused = document.activeElement?.closest?.(`#painting-${index}`);
  if (painting.mask) URL.revokeObjectURL(painting.mask.url);
  painting.mask = blob ? picked(blob, name) : null;
  renderPaintings();
  if (focused) $(`mask-${index}`).focus(); // the card was drawn anew
}

$("content").addEventListener("change", () => {
  const file = $("content").files[0];
  if (file) setPhoto(file, file.name);
});

$("styles").addEventListener("change", () => {
  const input = $("styles");
  $("paintings-error").textContent = "";
  for (const file of input.files) if (!addPainting(file, file.name)) break;
  input.value = ""; // the cards hold them now
  renderPaintings();
});

// Drag and drop: onto the photo's box, the paintings' box (added), or a painting (its mask).
function dropTarget(target, take) {
  target.addEventListener("dragover", (event) => {
    if (![...event.dataTransfer.types].includes("Files")) return;
    event.preventDefault();
    event.stopPropagation();
    target.classList.add("dragover");
  });
  target.addEventListener("dragleave", () => target.classList.remove("dragover"));
  target.addEventListener("drop", (event) => {
    event.preventDefault();
    event.stopPropagation();
    target.classList.remove("dragover");
    const files = [...event.dataTransfer.files];
    if (files.length) take(files);
  });
}

dropTarget($("content-drop"), (files) => setPhoto(files[0], files[0].name));
dropTarget($("paintings-drop"), (files) => {
  for (const file of files) if (!addPainting(file, file.name)) break;
  renderPaintings();
});

// Paste an image: into the painting (its mask) or the paintings' box that has the focus,
// else as the photo. Text pastes into text fields are left alone.
document.addEventListener("paste", (event) => {
  const files = [...(event.clipboardData?.files ?? [])].filter((file) => file.type.startsWith("image/"));
  if (!files.length) return;
  event.preventDefault();
  const name = (file, i) => (file.name && file.name !== "image.png" ? file.name : `pasted-${i + 1}.png`);
  const focused = document.activeElement;
  const card = focused?.closest?.(".painting");
  if (card) {
    const index = Number(card.id.split("-")[1]);
    setMask(index, files[0], name(files[0], 0));
  } else if (focused?.closest?.("#paintings-drop")) {
    files.forEach((file, i) => addPainting(file, name(file, i)));
    renderPaintings();
  } else {
    setPhoto(files[0], name(files[0], 0));
    setStatus($("stylize-status"), "The pasted image is the photo.");
  }
});

// ------------------------------------------------------------------ samples
let samples = { photos: [], paintings: [] };

async function loadSamples() {
  try {
    const response = await fetch("/samples");
    if (!response.ok) return;
    samples = await response.json();
  } catch {
    return;
  }
  const button = (kind, sample) => {
    const chosen = element(
      "button",
      { type: "button", class: "sample", "aria-pressed": "false", title: sample.title },
      element("img", { src: sample.thumbnail_url, alt: "", loading: "lazy", width: 80, height: 64 }),
      element("span", {}, sample.title),
    );
    chosen.dataset.url = sample.url;
    chosen.addEventListener("click", () => pickSample(kind, sample, chosen));
    return element("li", {}, chosen);
  };
  $("sample-photos").replaceChildren(...samples.photos.map((s) => button("photos", s)));
  $("sample-paintings").replaceChildren(...samples.paintings.map((s) => button("paintings", s)));
  $("sample-photos-title").hidden = !samples.photos.length;
  $("sample-paintings-title").hidden = !samples.paintings.length;
  $("samples").hidden = !samples.photos.length && !samples.paintings.length;
  markSamples();
}

// A sample is fetched once when clicked (the file itself, sent as an upload); a
// painting's button adds it, or takes it away when it is already chosen.
async function pickSample(kind, sample, button) {
  const status = $("stylize-status");
  if (kind === "paintings") {
    const index = paintings.findIndex((painting) => painting.sample?.url === sample.url);
    if (index >= 0) {
      removePainting(index);
      button.focus();
      return;
    }
  }
  try {
    const response = await fetch(sample.url);
    if (!response.ok) {
      setStatus(status, await errorText(response), true);
      return;
    }
    const blob = await response.blob();
    if (kind === "photos") setPhoto(blob, sample.name, sample);
    else if (addPainting(blob, sample.name, sample)) renderPaintings();
    if (status.classList.contains("error")) setStatus(status, "");
  } catch (error) {
    setStatus(status, `Network error: ${error}`, true);
  }
}

function markSamples() {
  for (const button of document.querySelectorAll("#sample-photos .sample")) {
    button.setAttribute("aria-pressed", String(photo?.sample?.url === button.dataset.url));
  }
  const chosen = new Set(paintings.map((painting) => painting.sample?.url));
  for (const button of document.querySelectorAll("#sample-paintings .sample")) {
    button.setAttribute("aria-pressed", String(chosen.has(button.dataset.url)));
  }
}

// ------------------------------------------------------------------ the cost, shown first
// The server's cost bound of a stylize request in pixel-passes (service/routes/stylize.py,
// stylize_cost): base^2 x (1 + styles x max(1, style_scale)^2) x passes, base =
// min(size, print_size_above), plus side^2 for each print-size octave above it.
function stylizeCost(size, styles, fullSizePasses, styleScale, baseSide) {
  const base = Math.min(size, baseSide);
  let octaves = 0;
  if (size > baseSide) {
    for (let side = size; side > baseSide; side = Math.ceil(side / 2)) octaves += side * side;
  }
  return Math.ceil(base * base * (1 + styles * Math.max(1, styleScale) ** 2) * fullSizePasses) + octaves;
}

function millions(value) {
  return value >= 1e6 ? `${(value / 1e6).toFixed(1)} M` : `${Math.round(value / 1e3)} k`;
}

function showCost() {
  const cost = $("size-cost");
  const size = Number($("size").value);
  cost.classList.remove("over");
  if (isVideo(photo?.blob)) {
    cost.textContent = "A video's work is counted in frames.";
    return;
  }
  if (!size || !limits) {
    cost.textContent = "";
    return;
  }
  const { stylize } = limits;
  const work = stylizeCost(
    size,
    Math.max(1, paintings.length),
    passes[$("preset").value] ?? 1.328125,
    Number($("style-scale").value),
    stylize.print_size_above,
  );
  const budget = stylize.max_job_pixel_passes;
  const masksTooLarge = masked() && size > stylize.max_mask_size;
  const over = work > budget || size > stylize.max_side || masksTooLarge;
  cost.textContent =
    `Cost: ${millions(work)} pixel-passes of the ${millions(budget)} a job may take here` +
    (size > stylize.max_side
      ? `; over this server's largest size (${stylize.max_side} px).`
      : work > budget
        ? ": over the budget; choose a smaller size, fewer paintings or a smaller style scale."
        : masksTooLarge
          ? `; masks work up to ${stylize.max_mask_size} px.`
          : ".");
  cost.classList.toggle("over", over);
}

for (const id of ["size", "preset", "style-scale"]) {
  $(id).addEventListener("input", showCost);
  $(id).addEventListener("change", showCost);
}

// The request's cost in image-steps, and whether it is over the server's max_image_steps.
function showGenerateCost() {
  const steps = Number($("steps").value) || ditDefaults?.steps;
  const images = Number($("num-images").value) || 1;
  const cost = $("generate-cost");
  const budget = limits?.generate?.max_image_steps;
  const over = Boolean(steps && budget && steps * images > budget);
  cost.textContent = steps
    ? `Cost: ${steps} steps x ${images} images = ${steps * images} image-steps` +
      (over ? `: over this server's budget of ${budget}; ask for fewer steps or images.` : ".")
    : "";
  cost.classList.toggle("over", over);
}

for (const id of ["steps", "num-images"]) $(id).addEventListener("input", showGenerateCost);

// ------------------------------------------------------------------ jobs
// Live previews: a job sent with previews=true has 'preview' events in its stream,
// {image: base64 JPEG, media_type, width, height, step, total} (at most two a second);
// the latest shows in the section's preview <img> until the final image replaces it.
// (A data URL or {url} would show too.)
function showPreview(prefix, data) {
  const preview = $(`${prefix}-preview`);
  const src =
    typeof data === "string"
      ? data
      : (data.url ?? (data.image ? `data:${data.media_type ?? "image/jpeg"};base64,${data.image}` : null));
  if (!src) return;
  preview.src = src;
  preview.hidden = false;
  $(`${prefix}-empty`).hidden = true;
}

function hidePreview(prefix) {
  const preview = $(`${prefix}-preview`);
  preview.hidden = true;
  preview.removeAttribute("src");
}

// Jobs this page follows on their event streams (the gallery need not poll for them).
const followed = new Set();

// Start a job with `request` (a fetch init), show its progress in the `prefix`-job
// block, and return the finished job (with its result), or null after an error.
// `onRefused(status, error)` also gets a refusal of the request itself; `onStarted(job)`
// the job once it is accepted.
async function runJob(url, request, prefix, { onRefused, onStarted } = {}) {
  const status = $(`${prefix}-status`);
  const bar = $(`${prefix}-progress`);
  const cancel = $(`${prefix}-cancel`);
  request.headers = { ...request.headers, ...authHeaders(), Prefer: "respond-async" };
  const started = await fetch(url, request);
  if (started.status !== 202) {
    const error = await errorOf(started);
    setStatus(status, describeError(started, error), true);
    if (onRefused) onRefused(started.status, error);
    return null;
  }
  const job = await started.json();
  followed.add(job.id);
  if (onStarted) onStarted(job);
  const jobUrl = `/v1/jobs/${job.id}`;
  bar.value = 0;
  $(`${prefix}-job`).hidden = false;
  cancel.disabled = false;
  cancel.onclick = async () => {
    cancel.disabled = true;
    await fetch(jobUrl, { method: "DELETE", headers: authHeaders() });
  };
  refreshJobs();
  try {
    // A replica that stops sends "reconnect": follow the job again (another replica).
    for (let following = true; following;) {
      following = false;
      const events = await fetch(`${jobUrl}/events`, { headers: authHeaders() });
      if (!events.ok) {
        setStatus(status, await errorText(events), true);
        return null;
      }
      for await (const { event, data } of serverSentEvents(events)) {
        if (event === "reconnect") {
          following = true;
          break;
        }
        if (event === "preview") {
          showPreview(prefix, data);
          continue;
        }
        if (!data.progress) continue;
        const { step, total } = data.progress;
        if (total > 0) {
          bar.max = total;
          bar.value = step;
          setStatus(status, `${data.state}: ${progressText(data.progress)}`);
        } else {
          setStatus(status, `${data.state}…`);
        }
      }
    }
    const final = await fetch(jobUrl, { headers: authHeaders() });
    if (!final.ok) {
      setStatus(status, await errorText(final), true);
      return null;
    }
    const done = await final.json();
    if (done.state === "cancelled") setStatus(status, "Cancelled.");
    else if (done.state === "failed") {
      setStatus(status, `${done.error.code}: ${done.error.message}`, true);
      showFieldErrors(prefix, done.error);
    }
    return done;
  } finally {
    cancel.disabled = true;
    $(`${prefix}-job`).hidden = true; // the bar keeps its last value (and max)
    hidePreview(prefix);
    followed.delete(job.id);
    refreshJobs();
  }
}

// The result's file name suffix, from the server's Content-Disposition ("ID-0.mp4").
function suffixOf(response) {
  const match = /filename="[^"]*\.([a-z0-9]+)"/.exec(response.headers.get("content-disposition") ?? "");
  return match ? match[1] : "bin";
}

async function fetchResult(job, index = 0) {
  const response = await fetch(`/v1/jobs/${job.id}/result?index=${index}`, { headers: authHeaders() });
  if (!response.ok) throw new Error(await errorText(response));
  return { blob: await response.blob(), suffix: suffixOf(response) };
}

// ------------------------------------------------------------------ style transfer
$("alpha").addEventListener("input", () => {
  $("alpha-value").textContent = Number($("alpha").value).toFixed(2);
});
$("style-scale").addEventListener("input", () => {
  $("style-scale-value").textContent = Number($("style-scale").value).toFixed(2);
});
$("format").addEventListener("change", () => {
  $("quality").disabled = $("format").value === "png"; // PNG is lossless
});

// What the page checks before sending (the server checks again): a photo, 1 to 4
// paintings, a mask on every painting or none, a weight above 0.
function checkStylize() {
  let first = null;
  const fail = (field, index, text) => {
    const control = showFieldError("stylize", field, index, text);
    first ??= control;
  };
  if (!photo)
    fail("content", undefined, "choose a photo (or a video) first: a sample, a file, a drop or a paste.");
  if (!paintings.length) fail("style", undefined, "choose one to four paintings.");
  if (masked()) {
    paintings.forEach((painting, i) => {
      if (!painting.mask)
        fail("mask", i, "give this painting a mask too, or remove the other masks: one mask per painting.");
    });
  } else if (paintings.length > 1 && paintings.every((painting) => painting.weight === 0)) {
    fail("style_weights", undefined, "at least one painting needs a weight above 0.");
  }
  const maskSide = limits?.stylize.max_mask_size;
  if (masked() && maskSide && Number($("size").value || 512) > maskSide)
    fail("size", undefined, `masks work up to ${maskSide} px: choose a smaller size, or remove the masks.`);
  if (first) first.focus();
  return first === null;
}

// The request's fields (and, apart, what this browser keeps to reopen the job).
function stylizeForm() {
  const form = new FormData();
  form.append("content", photo.blob, photo.name);
  for (const painting of paintings) form.append("style", painting.blob, painting.name);
  if (masked()) {
    for (const painting of paintings) form.append("mask", painting.mask.blob, painting.mask.name);
  } else if (paintings.length > 1) {
    form.append("style_weights", paintings.map((painting) => painting.weight).join(","));
  }
  form.append("alpha", $("alpha").value);
  form.append("preserve_color", $("preserve-color").checked ? "true" : "false");
  form.append("preset", $("preset").value);
  form.append("style_scale", $("style-scale").value);
  if ($("size").value !== "") form.append("size", $("size").value);
  form.append("format", $("format").value);
  if (!$("quality").disabled && $("quality").value !== "") form.append("quality", $("quality").value);
  return form;
}

// What this browser keeps of a job's inputs to reopen it (not a large video: over
// KEEP_MAX_BYTES in all it keeps the settings only).
const KEEP_MAX_BYTES = 40 * 1024 * 1024;

function keptInputs() {
  const blobs = [photo, ...paintings, ...paintings.map((painting) => painting.mask)].filter(Boolean);
  if (blobs.reduce((sum, item) => sum + item.blob.size, 0) > KEEP_MAX_BYTES) return null;
  const strip = (item) => item && { blob: item.blob, name: item.name, sample: item.sample };
  return {
    photo: strip(photo),
    paintings: paintings.map((painting) => ({
      ...strip(painting),
      weight: painting.weight,
      mask: strip(painting.mask),
    })),
    format: $("format").value,
    quality: $("quality").value,
  };
}

let stylized = null; // the shown result: {blob, name}
let beforeUrl = null;

// Show a stylize result: a still over the photo with the compare slider, or a video.
function showStylized(blob, suffix, photoBlob) {
  const image = $("stylize-result");
  const player = $("stylize-video");
  for (const shown of [image, player]) {
    if (shown.src.startsWith("blob:")) URL.revokeObjectURL(shown.src);
    shown.removeAttribute("src");
  }
  player.hidden = true;
  $("stylize-compare").hidden = true;
  if (beforeUrl) URL.revokeObjectURL(beforeUrl);
  beforeUrl = null;
  const video = blob.type.startsWith("video/");
  const shown = video ? player : image;
  shown.src = URL.createObjectURL(blob);
  if (video) player.hidden = false;
  else {
    const before = $("compare-before");
    if (photoBlob && !isVideo(photoBlob)) {
      beforeUrl = URL.createObjectURL(photoBlob);
      before.src = beforeUrl;
      before.hidden = false;
    } else {
      before.removeAttribute("src");
      before.hidden = true;
    }
    $("compare-slider").disabled = before.hidden;
    $("stylize-compare").hidden = false;
    setSplit(50);
  }
  const download = $("stylize-download");
  download.href = shown.src;
  download.download = `stylized.${suffix}`;
  $("stylize-as-photo").hidden = video;
  $("stylize-actions").hidden = false;
  $("stylize-empty").hidden = true;
  stylized = { blob, name: `stylized.${suffix}` };
}

// The compare slider: 0 shows the result alone, 100 the photo alone.
function setSplit(percent) {
  const slider = $("compare-slider");
  slider.value = String(percent);
  $("compare-frame").style.setProperty("--split", `${percent}%`);
  slider.setAttribute("aria-valuetext", `photo up to ${percent} %`);
}

$("compare-slider").addEventListener("input", () => setSplit(Number($("compare-slider").value)));
{
  // Dragging on the picture moves the split too (the slider is the keyboard's way).
  const frame = $("compare-frame");
  const follow = (event) => {
    const box = frame.getBoundingClientRect();
    setSplit(Math.round(Math.min(100, Math.max(0, ((event.clientX - box.left) / box.width) * 100))));
  };
  frame.addEventListener("pointerdown", (event) => {
    if ($("compare-slider").disabled) return;
    frame.setPointerCapture(event.pointerId);
    follow(event);
    frame.addEventListener("pointermove", follow);
  });
  const stop = () => frame.removeEventListener("pointermove", follow);
  frame.addEventListener("pointerup", stop);
  frame.addEventListener("pointercancel", stop);
}

$("stylize-as-photo").addEventListener("click", () => {
  if (!stylized) return;
  setPhoto(stylized.blob, stylized.name);
  setStatus($("stylize-status"), "The result is now the photo: choose paintings and stylize it again.");
  $("content-drop").scrollIntoView({ block: "nearest" });
});

// A refusal whose message speaks of the size, without naming a field, goes there too
// (the budget refusals: over max_job_stylize_pixel_passes, or over the format's side).
function showStylizeRefusal(status, error) {
  showFieldErrors("stylize", error);
}

$("stylize-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const status = $("stylize-status");
  clearFieldErrors($("stylize-form"));
  if (!checkStylize()) {
    setStatus(status, "Some fields need a look (marked ⚠).", true);
    return;
  }
  const form = stylizeForm();
  form.append("previews", "true"); // the stages' pictures while it works
  const inputs = keptInputs();
  const sentPhoto = photo.blob;
  $("stylize-button").disabled = true;
  setStatus(status, "Working…");
  // a result up to THUMB_MAX_SIDE is made small here: the gallery, listing the job from
  // its acceptance on, waits for it and does not fetch the server's thumbnail too
  // (larger: it asks for one)
  let ownThumbnail = null;
  try {
    const job = await runJob("/v1/stylize", { method: "POST", body: form }, "stylize", {
      onRefused: showStylizeRefusal,
      onStarted: (started) => {
        if ((started.parameters?.size ?? 0) <= THUMB_MAX_SIDE) {
          ownThumbnail = started.id;
          thumbPending.add(started.id);
        }
        if (inputs) keep.put("inputs", started.id, { kind: "stylize", inputs });
      },
    });
    if (job === null || job.state !== "succeeded") return;
    // The image file itself (a print is tens of MB: no base64 copy in the page)
    const { blob, suffix } = await fetchResult(job);
    showStylized(blob, suffix, sentPhoto);
    setStatus(status, "Done.");
    if (ownThumbnail && blob.type.startsWith("image/")) await saveThumbnail(job.id, blob);
  } catch (error) {
    setStatus(status, `Network error: ${error.message ?? error}`, true);
  } finally {
    if (ownThumbnail) thumbPending.delete(ownThumbnail);
    $("stylize-button").disabled = false;
  }
});

// ------------------------------------------------------------------ text to image
// Says how the prompt was read: the plan in words, the words it did not use, and the
// things the model never learned to draw (absent from jobs older than the field).
function showUnderstanding(result) {
  const shown = $("generate-understood");
  const notLearned = result.not_learned ?? [];
  const drawn =
    result.understood === null ? "Not understood; drawn as typed." : `Drawn as: ${result.understood}.`;
  const ignored = result.ignored.length ? ` Ignored: ${result.ignored.join(", ")}.` : "";
  const unknown = notLearned.length
    ? ` This model has not learned to draw: ${notLearned.join(", ")}.`
    : "";
  shown.textContent = drawn + ignored + unknown;
  const partial = result.understood === null || result.ignored.length > 0 || notLearned.length > 0;
  shown.classList.toggle("partial", partial);
  shown.hidden = false;
}

function base64Blob(b64, type = "image/png") {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  return new Blob([bytes], { type });
}

let generatedUrls = [];
let lastGenerate = null; // the last request's body

function showGenerated(result) {
  for (const url of generatedUrls) URL.revokeObjectURL(url);
  generatedUrls = [];
  $("generate-results").replaceChildren(
    ...result.images.map((b64, i) => {
      const seed = result.seeds[i];
      const blob = base64Blob(b64);
      const url = URL.createObjectURL(blob);
      generatedUrls.push(url);
      const image = element("img", { src: url, alt: `generated image, seed ${seed}`, title: `seed ${seed}` });
      const download = element(
        "a",
        { href: url, download: `seed-${seed}.png`, class: "button small" },
        "Download",
      );
      download.setAttribute("aria-label", `Download the image of seed ${seed}`);
      const asPhoto = element("button", { type: "button", class: "small" }, "Use as the photo");
      asPhoto.setAttribute("aria-label", `Use the image of seed ${seed} as the photo`);
      asPhoto.addEventListener("click", () => {
        setPhoto(blob, `seed-${seed}.png`);
        setStatus($("stylize-status"), `The image of seed ${seed} is now the photo.`);
        $("content-drop").scrollIntoView({ block: "nearest" });
      });
      return element("figure", {}, image, element("figcaption", {}, `seed ${seed}`, download, asPhoto));
    }),
  );
  showUnderstanding(result);
  $("generate-actions").hidden = false;
  $("generate-empty").hidden = true;
}

function generateBody() {
  const body = {
    prompt: $("prompt").value,
    num_images: Number($("num-images").value),
    plan_layout: $("plan-layout").checked,
  };
  const negative = $("negative-prompt").value.trim();
  if (negative) body.negative_prompt = negative;
  if ($("seed").value !== "") body.seed = Number($("seed").value);
  if ($("sampler").value) body.sampler = $("sampler").value;
  if ($("steps").value !== "") body.steps = Number($("steps").value);
  if ($("guidance-scale").value !== "") body.guidance_scale = Number($("guidance-scale").value);
  return body;
}

async function generate(body) {
  const status = $("generate-status");
  clearFieldErrors($("generate-form"));
  if (!body.prompt.trim()) {
    showFieldError("generate", "prompt", undefined, "write what to draw.");
    $("prompt").focus();
    setStatus(status, "Some fields need a look (marked ⚠).", true);
    return;
  }
  $("generate-button").disabled = true;
  $("generate-again").disabled = true;
  setStatus(status, "Working…");
  let accepted = null; // the job id, once accepted
  try {
    const request = {
      method: "POST",
      body: JSON.stringify({ ...body, previews: true }), // the estimate every few steps
      headers: { "Content-Type": "application/json" },
    };
    const job = await runJob("/v1/generate", request, "generate", {
      onRefused: (code, error) => showFieldErrors("generate", error),
      // its thumbnail is made here: the gallery listing it meanwhile waits for it
      onStarted: (started) => {
        accepted = started.id;
        thumbPending.add(accepted);
      },
    });
    if (job === null || job.state !== "succeeded") return;
    lastGenerate = body;
    showGenerated(job.result);
    setStatus(status, `Done (seeds ${job.result.seeds.join(", ")}).`);
    await saveThumbnail(job.id, base64Blob(job.result.images[0]));
  } catch (error) {
    setStatus(status, `Network error: ${error}`, true);
  } finally {
    if (accepted) thumbPending.delete(accepted);
    $("generate-button").disabled = false;
    $("generate-again").disabled = false;
  }
}

$("generate-form").addEventListener("submit", (event) => {
  event.preventDefault();
  generate(generateBody());
});

// The last request again, with a new random seed (shown in the seed field).
$("generate-again").addEventListener("click", () => {
  const seed = Math.floor(Math.random() * 2 ** 31);
  $("seed").value = String(seed);
  generate({ ...(lastGenerate ?? generateBody()), seed });
});

// ------------------------------------------------------------------ the gallery
const PAGE = 8; // cards per page
const MAX_PAGE = 100; // GET /v1/jobs's largest limit
const REFRESH_MIN_MS = 1000;
const POLL_MS = 5000;
const THUMB_SIDE = 256; // GET /v1/jobs/{id}/thumbnail?size=
const THUMB_MAX_SIDE = 2048; // larger results are not made small in the page
let wanted = PAGE; // cards shown: a page more with each "Show more"
let listed = []; // the jobs shown, newest first
let nextOffset = null; // GET /v1/jobs's next_offset after them
let refreshTimer = null;
let refreshDue = 0;
let lastRefresh = 0;
let listings = 0; // listings asked for so far: an answer to an older one is dropped
let listsInFlight = 0;
const thumbUrls = new Map(); // job id -> object URL

// The list says whether it is being updated: aria-busy while a listing is under way,
// data-pending while one is under way or due (a test waits for neither).
function showListState() {
  const list = $("jobs-list");
  list.setAttribute("aria-busy", String(listsInFlight > 0));
  list.dataset.pending = String(listsInFlight > 0 || refreshTimer !== null);
}

// Refresh the gallery after `delay` ms, at most once a second; calls in between merge.
function refreshJobs(delay = 0) {
  const due = Math.max(Date.now() + delay, lastRefresh + REFRESH_MIN_MS);
  if (refreshTimer !== null) {
    if (due >= refreshDue) return;
    clearTimeout(refreshTimer);
  }
  refreshDue = due;
  refreshTimer = setTimeout(async () => {
    refreshTimer = null;
    lastRefresh = Date.now();
    await showJobs();
  }, due - Date.now());
  showListState();
}

document.addEventListener("visibilitychange", () => {
  if (!document.hidden) refreshJobs();
});

const KIND_NAMES = { stylize: "Style transfer", stylize_video: "Video", generate: "Text to image" };

// Pages of the key's jobs from `offset` until `count` more are had (or none are left):
// {jobs, next} (next: the next page's offset, or null), or null after an error (shown).
async function fetchJobs(offset, count, known = new Set()) {
  const status = $("jobs-status");
  const jobs = [];
  let next = offset;
  try {
    while (next !== null && jobs.length < count) {
      const limit = Math.min(MAX_PAGE, count - jobs.length);
      const response = await fetch(`/v1/jobs?limit=${limit}&offset=${next}`, { headers: authHeaders() });
      if (!response.ok) {
        setStatus(status, await errorText(response), true);
        return null;
      }
      const page = await response.json();
      for (const job of page.jobs) {
        // a job made meanwhile shifts the pages: one seen already is not shown twice
        if (!known.has(job.id)) jobs.push(job);
        known.add(job.id);
      }
      next = page.next_offset;
    }
  } catch (error) {
    setStatus(status, `Network error: ${error}`, true);
    return null;
  }
  return { jobs, next };
}

// One listing at a time is shown: the latest asked for (an answer that comes after a
// newer listing was asked for is dropped: it may be older than what is shown).
async function latestListing(fetching) {
  const mine = ++listings;
  listsInFlight += 1;
  showListState();
  try {
    const answer = await fetching();
    return mine === listings ? answer : null;
  } finally {
    listsInFlight -= 1;
    showListState();
  }
}

async function showJobs() {
  const answer = await latestListing(() => fetchJobs(0, wanted));
  if (answer) showListed(answer.jobs, answer.next);
}

// "Show more": the next page only, after the jobs shown.
async function showMoreJobs() {
  wanted = listed.length + PAGE;
  if (nextOffset === null) return;
  const shown = new Set(listed.map((job) => job.id));
  const answer = await latestListing(() => fetchJobs(nextOffset, PAGE, shown));
  if (answer) showListed([...listed, ...answer.jobs], answer.next);
}

function showListed(jobs, next) {
  listed = jobs;
  nextOffset = next;
  const list = $("jobs-list");
  const focusedId = document.activeElement?.closest?.(".card")?.dataset.job;
  list.replaceChildren(...jobs.map(jobCard));
  if (focusedId) list.querySelector(`[data-job="${focusedId}"] button`)?.focus();
  $("jobs-more").hidden = next === null;
  setStatus($("jobs-status"), jobs.length ? "" : "No results yet: they show here once a job is sent.");
  loadThumbnails(jobs);
  const unfinished = jobs.some(
    (job) => !["succeeded", "failed", "cancelled"].includes(job.state) && !followed.has(job.id),
  );
  if (unfinished && !document.hidden) refreshJobs(POLL_MS);
}

$("jobs-refresh").addEventListener("click", () => refreshJobs());
$("jobs-more").addEventListener("click", showMoreJobs);

function describeJob(job) {
  const p = job.parameters ?? {};
  if (job.kind === "generate") return `“${p.prompt ?? ""}”${p.seeds ? `, seed ${p.seeds[0]}` : ""}`;
  if (job.kind === "stylize") {
    const styles = p.style_weights ? `${p.style_weights.length} paintings` : "";
    return [p.size ? `${p.size} px` : "", styles, p.masks ? `${p.masks} masks` : ""]
      .filter(Boolean)
      .join(", ");
  }
  return "";
}

function jobCard(job) {
  const finished = ["succeeded", "failed", "cancelled"].includes(job.state);
  const labelId = `job-${job.id}-what`;
  const when = new Date(job.created_at * 1000).toLocaleTimeString();
  const shot = element("div", { class: "shot" });
  const placeholder = job.state !== "succeeded" ? job.state : job.kind === "stylize_video" ? "a video" : "…";
  const cached = thumbUrls.get(job.id);
  if (cached) shot.append(thumbImage(job, cached));
  else shot.textContent = placeholder;
  const progress = !finished && job.progress.total ? ` (${progressText(job.progress)})` : "";
  const card = element(
    "li",
    { class: "card" },
    shot,
    element("p", { id: labelId, class: "what" }, `${KIND_NAMES[job.kind] ?? job.kind}, ${when}`),
    element("p", { class: `state-${job.state}` }, `${job.state}${progress}`),
    element("p", {}, describeJob(job)),
  );
  card.dataset.job = job.id;
  card.dataset.kind = job.kind;
  card.dataset.state = job.state;
  const buttons = element("div", { class: "buttons" });
  const add = (text, action) => {
    const button = element("button", { type: "button", class: "small", "aria-describedby": labelId }, text);
    button.addEventListener("click", () => action(button));
    buttons.append(button);
  };
  if (job.state === "succeeded") {
    if (job.kind !== "stylize_video") add("Open", () => openJob(job));
    add("Download", () => downloadJob(job));
  }
  add(finished ? "Delete" : "Cancel", (button) => deleteJob(job, button));
  card.append(buttons);
  return card;
}

function thumbImage(job, url) {
  return element("img", {
    src: url,
    alt: `${KIND_NAMES[job.kind] ?? job.kind} result`,
    class: job.kind === "generate" ? "pixelated" : "",
  });
}

async function thumbnailOf(blob) {
  const bitmap = await createImageBitmap(blob);
  const scale = Math.min(1, THUMB_SIDE / Math.max(bitmap.width, bitmap.height));
  const canvas = element("canvas", {
    width: Math.max(1, Math.round(bitmap.width * scale)),
    height: Math.max(1, Math.round(bitmap.height * scale)),
  });
  canvas.getContext("2d").drawImage(bitmap, 0, 0, canvas.width, canvas.height);
  bitmap.close();
  return new Promise((resolve) => canvas.toBlob(resolve, scale < 1 ? "image/jpeg" : "image/png", 0.85));
}

async function saveThumbnail(id, blob) {
  thumbPending.add(id); // made here: the gallery waits for it instead of fetching one
  try {
    const small = await thumbnailOf(blob);
    if (thumbUrls.has(id)) URL.revokeObjectURL(thumbUrls.get(id));
    thumbUrls.set(id, URL.createObjectURL(small));
    await keep.put("thumbs", id, { blob: small });
    const shot = document.querySelector(`[data-job="${id}"] .shot`);
    if (shot)
      shot.replaceChildren(thumbImage({ kind: shot.closest(".card")?.dataset.kind }, thumbUrls.get(id)));
  } catch {
    // not an image the browser reads: the card keeps its words
  } finally {
    thumbPending.delete(id);
  }
}

// Thumbnails of the listed cards: from memory, from IndexedDB, or the server's
// (GET /v1/jobs/{id}/thumbnail: a small JPEG, never the whole result), two at a time.
let thumbQueue = [];
let thumbWorkers = 0;
const thumbPending = new Set(); // job ids being made now

function loadThumbnails(jobs) {
  thumbQueue = jobs.filter(
    (job) =>
      job.state === "succeeded" &&
      job.kind !== "stylize_video" &&
      !thumbUrls.has(job.id) &&
      !thumbPending.has(job.id),
  );
  while (thumbWorkers < 2 && thumbQueue.length) {
    thumbWorkers += 1;
    thumbWorker().finally(() => {
      thumbWorkers -= 1;
    });
  }
}

async function thumbWorker() {
  while (thumbQueue.length) {
    const job = thumbQueue.shift();
    if (thumbUrls.has(job.id) || thumbPending.has(job.id)) continue;
    thumbPending.add(job.id);
    try {
      await thumbFor(job);
    } finally {
      thumbPending.delete(job.id);
    }
  }
}

async function thumbFor(job) {
  const shot = () => document.querySelector(`[data-job="${job.id}"] .shot`);
  const kept = await keep.get("thumbs", job.id);
  if (kept?.blob) {
    thumbUrls.set(job.id, URL.createObjectURL(kept.blob));
  } else {
    try {
      const response = await fetch(`/v1/jobs/${job.id}/thumbnail?size=${THUMB_SIDE}`, {
        headers: authHeaders(),
      });
      if (!response.ok) return; // the card keeps its words
      const small = await response.blob();
      thumbUrls.set(job.id, URL.createObjectURL(small));
      await keep.put("thumbs", job.id, { blob: small });
    } catch {
      return;
    }
  }
  shot()?.replaceChildren(thumbImage(job, thumbUrls.get(job.id)));
}

async function downloadJob(job) {
  const status = $("jobs-status");
  try {
    const { blob, suffix } = await fetchResult(job);
    const url = URL.createObjectURL(blob);
    const link = element("a", { href: url, download: `${job.kind}-${job.id.slice(0, 8)}.${suffix}` });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
    setStatus(status, "Downloaded.");
  } catch (error) {
    setStatus(status, `${error.message ?? error}`, true);
  }
}

async function deleteJob(job, button) {
  const status = $("jobs-status");
  button.disabled = true;
  const response = await fetch(`/v1/jobs/${job.id}`, { method: "DELETE", headers: authHeaders() });
  if (!response.ok && response.status !== 404) {
    setStatus(status, await errorText(response), true);
    button.disabled = false;
    return;
  }
  const card = button.closest(".card");
  const next = card.nextElementSibling ?? card.previousElementSibling;
  if (["succeeded", "failed", "cancelled"].includes(job.state)) {
    await keep.forget(job.id);
    if (thumbUrls.has(job.id)) URL.revokeObjectURL(thumbUrls.get(job.id));
    thumbUrls.delete(job.id);
    card.remove();
    if (listed.some((shown) => shown.id === job.id)) {
      listed = listed.filter((shown) => shown.id !== job.id);
      if (nextOffset !== null) nextOffset -= 1; // the pages after it moved up by one
    }
    setStatus(status, "Deleted.");
  } else {
    setStatus(status, "Cancelled.");
  }
  (next?.querySelector("button") ?? $("jobs-refresh")).focus();
  refreshJobs();
}

// Reopen a job: its parameters back in the form, its result on the stage, and its
// inputs too when this browser sent them.
async function openJob(job) {
  const p = job.parameters ?? {};
  if (job.kind === "generate") {
    $("prompt").value = p.prompt ?? "";
    $("negative-prompt").value = p.negative_prompt ?? "";
    $("num-images").value = String(p.seeds?.length ?? 1);
    $("seed").value = p.seeds ? String(p.seeds[0]) : "";
    $("steps").value = p.steps ?? "";
    $("guidance-scale").value = p.guidance_scale ?? "";
    $("sampler").value = p.sampler ?? "";
    $("plan-layout").checked = p.plan_layout ?? true;
    showGenerateCost();
    const status = $("generate-status");
    const response = await fetch(`/v1/jobs/${job.id}`, { headers: authHeaders() });
    if (!response.ok) {
      setStatus(status, await errorText(response), true);
      return;
    }
    const done = await response.json();
    lastGenerate = generateBody();
    showGenerated(done.result);
    setStatus(status, `Reopened (seeds ${done.result.seeds.join(", ")}).`);
    $("generate-title").scrollIntoView({ block: "start" });
    $("prompt").focus();
    return;
  }
  const status = $("stylize-status");
  $("alpha").value = String(p.alpha ?? 1);
  $("alpha-value").textContent = Number($("alpha").value).toFixed(2);
  $("preserve-color").checked = Boolean(p.preserve_color);
  if (p.preset) $("preset").value = p.preset;
  $("style-scale").value = String(p.style_scale ?? 1);
  $("style-scale-value").textContent = Number($("style-scale").value).toFixed(2);
  if (p.size) $("size").value = String(p.size);
  const kept = (await keep.get("inputs", job.id))?.inputs;
  if (kept) {
    if (kept.photo) setPhoto(kept.photo.blob, kept.photo.name, kept.photo.sample);
    for (const painting of paintings) URL.revokeObjectURL(painting.url);
    paintings = kept.paintings.map((painting, i) => ({
      ...picked(painting.blob, painting.name, painting.sample),
      weight: p.style_weights ? p.style_weights[i] : painting.weight,
      mask: painting.mask ? picked(painting.mask.blob, painting.mask.name) : null,
    }));
    $("format").value = kept.format ?? "png";
    $("quality").disabled = $("format").value === "png";
    $("quality").value = kept.quality ?? "";
    renderPaintings();
  }
  try {
    const { blob, suffix } = await fetchResult(job);
    showStylized(blob, suffix, kept?.photo?.blob);
    setStatus(
      status,
      kept
        ? "Reopened with its photo, paintings and settings."
        : "Reopened with its settings (its photo and paintings were sent from elsewhere: choose them again).",
    );
  } catch (error) {
    setStatus(status, `${error.message ?? error}`, true);
  }
  $("stylize-title").scrollIntoView({ block: "start" });
  $("stylize-button").focus();
}

// ------------------------------------------------------------------ start
onKeyChange();
loadSamples();
renderPaintings();
showGenerateCost();
