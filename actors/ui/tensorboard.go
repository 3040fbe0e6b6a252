package ui

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	messages "github.com/frognano/frognano/actors/messages/v1"
)

// TensorBoard reads event files: TFRecords (length, masked CRC32C of the
// length, data, masked CRC32C of the data) each holding a tensorflow.Event
// proto. The few fields written here are encoded by hand with protowire, so
// frognano needs no TensorFlow protos:
//
//	Event         { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//	Summary       { repeated Value value = 1; }
//	Summary.Value { string tag = 1; float simple_value = 2; }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskedCRC is TFRecord's masked CRC32C.
func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// appendRecord frames data as one TFRecord.
func appendRecord(out, data []byte) []byte {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(data)))
	out = append(out, n[:]...)
	out = binary.LittleEndian.AppendUint32(out, maskedCRC(n[:]))
	out = append(out, data...)
	return binary.LittleEndian.AppendUint32(out, maskedCRC(data))
}

// scalar is one tagged value of a summary.
type scalar struct {
	Tag   string
	Value float32
}

// eventBytes encodes an Event with a file version or a summary of scalars.
func eventBytes(wallTime float64, step int64, fileVersion string, scalars []scalar) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, math.Float64bits(wallTime))
	if step != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(step))
	}
	if fileVersion != "" {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, fileVersion)
	}
	if len(scalars) > 0 {
		var summary []byte
		for _, s := range scalars {
			var v []byte
			v = protowire.AppendTag(v, 1, protowire.BytesType)
			v = protowire.AppendString(v, s.Tag)
			v = protowire.AppendTag(v, 2, protowire.Fixed32Type)
			v = protowire.AppendFixed32(v, math.Float32bits(s.Value))
			summary = protowire.AppendTag(summary, 1, protowire.BytesType)
			summary = protowire.AppendBytes(summary, v)
		}
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendBytes(b, summary)
	}
	return b
}

// pointScalars are the values TensorBoard plots for one curve point:
// train/<metric> for each metric, held_out/<level> with its interval under
// held_out_low/ and held_out_high/, and run/policy_version, run/wall_seconds,
// run/cpu_seconds. Metrics that are not finite are left out.
func pointScalars(p *messages.RunPoint) []scalar {
	out := []scalar{
		{"run/policy_version", float32(p.GetPolicyVersion())},
		{"run/wall_seconds", float32(p.GetWallSeconds())},
		{"run/cpu_seconds", float32(p.GetCpuSeconds())},
	}
	for _, k := range slices.Sorted(maps.Keys(p.GetMetrics())) {
		if v := p.GetMetrics()[k]; finite(v) {
			out = append(out, scalar{"train/" + k, float32(v)})
		}
	}
	for _, h := range p.GetHeldOut() {
		name := heldOutName(h.GetHintLevel())
		out = append(out, scalar{"held_out/" + name, float32(h.GetPass1())},
			scalar{"held_out_low/" + name, float32(h.GetPass1Low())},
			scalar{"held_out_high/" + name, float32(h.GetPass1High())})
	}
	return out
}

// TensorBoardFile is the name of a run's event file: fixed by the run's
// start, so exporting again replaces the file instead of adding a second
// one that TensorBoard would read as well.
func TensorBoardFile(run *messages.Run) string {
	return fmt.Sprintf("events.out.tfevents.%d.frognano-%s", run.GetStartedUnixNano()/int64(time.Second), safeFileName(run.GetId()))
}

// WriteTensorBoardEvents writes a run's curve as TensorBoard events: the
// file version, then one event per point at the point's step, timed at the
// run's start plus the point's wall seconds.
func WriteTensorBoardEvents(w io.Writer, run *messages.Run) error {
	start := float64(run.GetStartedUnixNano()) / 1e9
	buf := appendRecord(nil, eventBytes(start, 0, "brain.Event:2", nil))
	for _, p := range run.GetCurve() {
		buf = appendRecord(buf, eventBytes(start+p.GetWallSeconds(), p.GetStep(), "", pointScalars(p)))
	}
	_, err := w.Write(buf)
	return err
}

// WriteTensorBoard writes a run's event file into dir (made if missing)
// and returns its path; `tensorboard --logdir DIR` then plots the run.
func WriteTensorBoard(dir string, run *messages.Run) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, TensorBoardFile(run))
	tmp, err := os.CreateTemp(dir, ".tfevents-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	bw := bufio.NewWriter(tmp)
	if err := WriteTensorBoardEvents(bw, run); err != nil {
		tmp.Close()
		return "", err
	}
	if err := bw.Flush(); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	return path, os.Rename(tmp.Name(), path)
}
