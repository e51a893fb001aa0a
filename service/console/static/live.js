// The live view: draws one streamed chat completion as the API sends it (service/console/pages/live.py).
// Everything drawn comes from the stream's own chunks: content deltas (the kept text), guardrail_event chunks
// (rollbacks with position, offset, term, list, retracted fragment and attempt; each choice's finish), the finish
// chunk and the usage chunk. Nothing is inferred: a rollback is drawn at the character offset its event gives.
(function () {
  "use strict";
  var form = document.getElementById("live-form");
  if (!form) { return; }
  var answer = document.getElementById("live-answer");
  var events = document.getElementById("live-events");
  var status = document.getElementById("live-status");
  var send = document.getElementById("live-send");
  var stop = document.getElementById("live-stop");
  var controller = null;

  // The answer so far: characters received, and rollback markers waiting for the text to reach their offset, in
  // order of offset (a rollback's offset is never before the text already streamed: released text is final).
  var state = null;

  function reset() {
    answer.textContent = "";
    events.textContent = "";
    state = { received: 0, pending: [], rollbacks: 0, timing: { sent: performance.now() } };
    delete answer.dataset.firstTextMs;
    delete answer.dataset.finishReason;
  }

  function say(text) { status.textContent = text; }

  function logEvent(text, kind) {
    var item = document.createElement("li");
    item.className = kind;
    item.textContent = text;
    events.appendChild(item);
  }

  function marker(event) {
    var node = document.createElement("span");
    node.className = "rollback";
    var label = "Rollback " + state.rollbacks + " at token " + event.position;
    if (event.fragment !== null) {
      var gone = document.createElement("del");
      gone.className = "fragment";
      gone.textContent = event.fragment;
      node.appendChild(gone);
    }
    var why = document.createElement("span");
    why.className = "why";
    why.textContent = event.term !== null
      ? "⟲ " + event.term + " · " + event.list + (event.attempt > 1 ? " · retry " + event.attempt : "")
      : "⟲ list " + event.list + " (not your list: term hidden)" + (event.attempt > 1 ? " · retry " + event.attempt : "");
    node.appendChild(why);
    node.setAttribute("role", "note");
    node.setAttribute("aria-label", label + ": " + why.textContent.replace("⟲ ", "") +
      (event.fragment !== null ? "; retracted text: " + event.fragment : ""));
    return node;
  }

  // Append kept text, placing the markers whose offset this text reaches.
  function appendText(text) {
    var at = 0;
    while (state.pending.length && state.pending[0].offset <= state.received + (text.length - at)) {
      var next = state.pending.shift();
      var cut = next.offset - state.received;
      if (cut > 0) { answer.appendChild(document.createTextNode(text.slice(at, at + cut))); }
      at += Math.max(cut, 0);
      state.received += Math.max(cut, 0);
      answer.appendChild(next.node);
    }
    if (at < text.length) {
      answer.appendChild(document.createTextNode(text.slice(at)));
      state.received += text.length - at;
    }
    if (text && state.timing.firstText === undefined) {
      state.timing.firstText = performance.now();
      answer.dataset.firstTextMs = (state.timing.firstText - state.timing.sent).toFixed(1);
      answer.dataset.firstTextAt = (performance.timeOrigin + state.timing.firstText).toFixed(1);
    }
  }

  function onGuardEvent(event) {
    if (event.index !== 0) { return; }
    if (event.type === "rollback") {
      state.rollbacks += 1;
      var node = marker(event);
      // A rollback to before a marker still waiting for its text took that text back too: the marker's
      // fragment stood in text that is now gone, so it is drawn where this rollback happened, before it.
      state.pending.forEach(function (p) { p.offset = Math.min(p.offset, event.offset); });
      state.pending.push({ offset: event.offset, node: node });
      appendText("");
      logEvent("Rollback at token " + event.position + " (after " + event.offset + " characters): " +
        (event.term !== null ? "“" + event.term + "”" : "a term") + " of list " + event.list +
        (event.fragment !== null ? ", retracted “" + event.fragment + "”" : "") + ", " + event.tokens_discarded +
        " token" + (event.tokens_discarded === 1 ? "" : "s") + " taken back" +
        (event.attempt > 1 ? ", retry " + event.attempt + " at this position" : "") +
        (event.escalated ? ", term escalated" : "") + (event.evasion ? ", an evasion form" : "") + ".", "event-rollback");
    } else if (event.type === "finish") {
      logEvent("Finished: " + event.finish_reason + (event.filtered_by ? ", filtered by list " + event.filtered_by : "") +
        "; " + event.rollbacks + " rollback" + (event.rollbacks === 1 ? "" : "s") + ".", "event-finish");
      answer.dataset.finishReason = event.finish_reason;
      say("Finished: " + event.finish_reason + (event.filtered_by ? " (filtered by " + event.filtered_by + ")" : "") + ".");
    }
  }

  function onChunk(chunk) {
    if (chunk.error) {
      say("Error: " + chunk.error.message);
      logEvent("Error: " + chunk.error.message, "event-error");
      return;
    }
    if (chunk.guardrail_event) { onGuardEvent(chunk.guardrail_event); return; }
    if (chunk.usage && (!chunk.choices || !chunk.choices.length)) {
      logEvent("Usage: " + chunk.usage.completion_tokens + " completion tokens, " + chunk.usage.rollbacks +
        " rollbacks, " + chunk.usage.forward_passes + " forward passes.", "event-usage");
      return;
    }
    (chunk.choices || []).forEach(function (choice) {
      if (choice.index !== 0) { return; }
      if (choice.delta && choice.delta.content) { appendText(choice.delta.content); }
    });
  }

  function flush() {
    while (state.pending.length) { answer.appendChild(state.pending.shift().node); }
  }

  async function run() {
    reset();
    controller = new AbortController();
    send.disabled = true;
    stop.disabled = false;
    say("Waiting for the model…");
    try {
      var response = await fetch(form.action, {
        method: "POST", body: new URLSearchParams(new FormData(form)), signal: controller.signal,
        headers: { "Content-Type": "application/x-www-form-urlencoded" }, credentials: "same-origin",
      });
      if (!response.ok) {
        var body = await response.json().catch(function () { return {}; });
        var error = body.error || {};
        say("Refused (HTTP " + response.status + "): " + (error.message || response.statusText) +
          (error.param ? " (" + error.param + ")" : ""));
        return;
      }
      say("Streaming…");
      var reader = response.body.getReader();
      var decoder = new TextDecoder();
      var buffer = "";
      for (;;) {
        var read = await reader.read();
        if (read.done) { break; }
        buffer += decoder.decode(read.value, { stream: true });
        var parts = buffer.split("\n\n");
        buffer = parts.pop();
        parts.forEach(function (part) {
          part.split("\n").forEach(function (line) {
            if (line.indexOf("data: ") !== 0) { return; }  // ": keep-alive" comments and blank lines
            var data = line.slice(6);
            if (data !== "[DONE]") { onChunk(JSON.parse(data)); }
          });
        });
      }
      flush();
    } catch (error) {
      say(error.name === "AbortError" ? "Stopped." : "The stream broke: " + error.message);
    } finally {
      send.disabled = false;
      stop.disabled = true;
      controller = null;
    }
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    if (!controller) { run(); }
  });
  stop.addEventListener("click", function () { if (controller) { controller.abort(); } });
}());
