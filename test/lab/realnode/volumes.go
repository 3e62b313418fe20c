package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The real node's storage: a StorageClass without a provisioner and a few
// hostPath PersistentVolumes under the lab dir, pinned to the node, as a
// platform's "local" class would be. PVCs of that class (the slurm chart's
// slurmctld state, MariaDB's data) bind to them when their pod is placed.
const (
	// StorageClass is the real node's StorageClass.
	StorageClass = "lab-local"
	volumes      = 6
	volumeSize   = "5Gi"
)

// EnsureVolumes makes the StorageClass and the volumes, and makes a
// Released one Available again.
func (n *Node) EnsureVolumes(ctx context.Context) error {
	kc, err := n.Client()
	if err != nil {
		return err
	}
	wait := storagev1.VolumeBindingWaitForFirstConsumer
	reclaim := corev1.PersistentVolumeReclaimRetain
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: StorageClass},
		Provisioner:       "kubernetes.io/no-provisioner",
		VolumeBindingMode: &wait,
		ReclaimPolicy:     &reclaim,
	}
	if _, err := kc.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("storage class %s: %w", StorageClass, err)
	}
	for i := range volumes {
		name := fmt.Sprintf("lab-pv-%d", i)
		dir := n.path("pv", name)
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return err
		}
		hostPath := corev1.HostPathDirectory
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(volumeSize)},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: reclaim,
				StorageClassName:              StorageClass,
				PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &hostPath}},
				NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{Name}}},
				}}}},
			},
		}
		_, err := kc.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = n.recycleVolume(ctx, name, dir)
		}
		if err != nil {
			return fmt.Errorf("persistent volume %s: %w", name, err)
		}
	}
	return nil
}

// recycleVolume makes a Released volume (its claim deleted) Available
// again, empty, as a platform's delete-and-reprovision would.
func (n *Node) recycleVolume(ctx context.Context, name, dir string) error {
	kc, err := n.Client()
	if err != nil {
		return err
	}
	pv, err := kc.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
	if err != nil || pv.Status.Phase != corev1.VolumeReleased {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	pv.Spec.ClaimRef = nil
	_, err = kc.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{})
	return err
}
