package daemon

import (
	"log/slog"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
)

// notify tells a supervising systemd (Type=notify) the node's state. Without
// NOTIFY_SOCKET in the environment it does nothing, so a node run by hand or by
// launchd is unaffected.
func notify(log *slog.Logger, state string) {
	if _, err := sd.SdNotify(false, state); err != nil {
		log.Warn("systemd notify", "state", state, "err", err)
	}
}

// watchdogEvery is how often the main loop pings systemd's watchdog: half the
// interval systemd set (WATCHDOG_USEC), or never (nil channel) when it set none.
func watchdogEvery(log *slog.Logger) (<-chan time.Time, func()) {
	iv, err := sd.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("systemd watchdog", "err", err)
	}
	if err != nil || iv <= 0 {
		return nil, func() {}
	}
	t := time.NewTicker(iv / 2)
	return t.C, t.Stop
}
