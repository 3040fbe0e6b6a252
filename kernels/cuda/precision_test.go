package cuda

import "testing"

func TestPrecisionString(t *testing.T) {
	for _, tt := range []struct {
		p    Precision
		want string
	}{{F32, "f32"}, {BF16, "bf16"}, {Precision(7), "Precision(7)"}} {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("Precision(%d).String() = %q, want %q", int(tt.p), got, tt.want)
		}
	}
}
