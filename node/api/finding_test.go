package api

import (
	"reflect"
	"testing"
)

func TestEveryFindingCodeIsDescribedOnce(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Codes {
		if seen[c.Code] {
			t.Errorf("code %s listed twice", c.Code)
		}
		seen[c.Code] = true
		if c.Meaning == "" || c.Severity.Rank() == 0 && c.Severity != SevInfo {
			t.Errorf("code %s: severity %q meaning %q", c.Code, c.Severity, c.Meaning)
		}
		if got, ok := LookupCode(c.Code); !ok || got != c {
			t.Errorf("LookupCode(%s) = %+v, %v", c.Code, got, ok)
		}
	}
	for _, code := range []string{
		CodeTier0, CodeBackendUnavailable, CodeServerRefused, CodePluginRefused, CodeExemptRunning,
		CodeExemptionUnmatched, CodeExemptionCommit, CodeExemptionPrivate, CodeModeOff, CodeModeAutoHostNet,
		CodeMacAutoUnsandboxed, CodeNoPluginUsers, CodePluginUserFallback, CodeUIDCollision, CodeGVisorRequired,
		CodeSeatbeltNoLimits, CodeTenantListUnreadable, CodeCrashLoop, CodeToolCollision, CodeManifestInvalid,
	} {
		if !seen[code] {
			t.Errorf("code %s is not in Codes (the reference in docs/operators.md is generated from it)", code)
		}
	}
	if _, ok := LookupCode("no-such-code"); ok {
		t.Error("LookupCode of an unknown code succeeded")
	}
	// The promises' codes are spelled as the operator reads them.
	for code, want := range map[string]string{CodeTier0: "tier-0", CodeExemptRunning: "exempt-unsandboxed",
		CodeExemptionPrivate: "exemption-ignored-private", CodeExemptionCommit: "exemption-commit-mismatch", CodeServerRefused: "server-refused"} {
		if code != want {
			t.Errorf("code %q, want %q", code, want)
		}
	}
}

func TestSeverityRankOrdersCriticalFirst(t *testing.T) {
	if !(SevCritical.Rank() > SevError.Rank() && SevError.Rank() > SevWarning.Rank() && SevWarning.Rank() > SevInfo.Rank()) {
		t.Error("severity ranks out of order")
	}
	if Severity("bogus").Rank() != SevInfo.Rank() {
		t.Error("an unknown severity does not rank lowest")
	}
}

func TestSortFindingsBySeverityThenCodeThenSubject(t *testing.T) {
	fs := []Finding{
		{Code: "b", Severity: SevWarning, Subject: "z"},
		{Code: "a", Severity: SevInfo, Subject: "a"},
		{Code: "b", Severity: SevWarning, Subject: "a"},
		{Code: "z", Severity: SevCritical, Subject: "a"},
		{Code: "a", Severity: SevWarning, Subject: "q"},
		{Code: "c", Severity: SevError, Subject: "a"},
	}
	SortFindings(fs)
	var got []string
	for _, f := range fs {
		got = append(got, string(f.Severity)+"/"+f.Code+"/"+f.Subject)
	}
	want := []string{"critical/z/a", "error/c/a", "warning/a/q", "warning/b/a", "warning/b/z", "info/a/a"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}
