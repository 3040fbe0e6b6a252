package pass

import "testing"

func TestOne(t *testing.T) {}

func TestSub(t *testing.T) {
	t.Run("first case", func(t *testing.T) {})
	t.Run("second", func(t *testing.T) {})
}

func TestSkipped(t *testing.T) { t.Skip("not today") }
